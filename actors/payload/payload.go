// Package payload holds the typed payloads of run operations, their schema
// rules, and their translation into engine inputs. The HTTP layer checks a
// payload here before a grain sees it; the executor decodes the same stored
// bytes here again when it runs (or replays) the operation.
package payload

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	json "github.com/goccy/go-json"

	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/loss"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/optim"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/train"
)

// Operation kinds.
const (
	Forward               = "forward"
	ForwardBackward       = "forward_backward"
	OptimStep             = "optim_step"
	SaveState             = "save_state"
	LoadState             = "load_state"
	SaveWeightsForSampler = "save_weights_for_sampler"
	ExportLoRA            = "export_lora"
	Sample                = "sample"
	Logprobs              = "logprobs"
	Finish                = "finish"
	Cancel                = "cancel"
)

// Limits of a training batch.
const (
	MaxTokenIDs = 32768 // per model input
	MaxDatums   = 4096  // per forward or forward_backward
)

// Invalid is a schema violation at one field, named by its JSON path.
type Invalid struct {
	Field  string
	Reason string
}

func (e *Invalid) Error() string {
	if e.Field == "" {
		return "body: " + e.Reason
	}
	return e.Field + ": " + e.Reason
}

// Malformed is a body or payload that is not well-formed JSON.
type Malformed struct{ Reason string }

func (e *Malformed) Error() string { return "malformed JSON: " + e.Reason }

// Strict decodes one JSON value from raw into v (a pointer), refusing
// unknown fields, wrong types and trailing data; field prefixes the paths it
// reports. It decodes with goccy/go-json, several times faster than
// encoding/json on long token arrays (see BenchmarkDecodeTokens); when that
// fails it decodes again with encoding/json, whose errors name the field and
// the offending value, to tell the caller exactly what is wrong.
func Strict(raw []byte, v any, field string) error {
	if err := strict(json.NewDecoder(bytes.NewReader(raw)), v); err == nil {
		return nil
	}
	again := reflect.New(reflect.TypeOf(v).Elem()).Interface()
	err := strict(stdjson.NewDecoder(bytes.NewReader(raw)), again)
	if err == nil {
		err = errors.New("the body does not match the schema")
	}
	return explain(err, field)
}

// decoder is what Strict needs of both JSON packages.
type decoder interface {
	Decode(v any) error
	DisallowUnknownFields()
	More() bool
}

func strict(dec decoder, v any) error {
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return &stdjson.SyntaxError{}
	}
	return nil
}

// explain turns an encoding/json error into a Malformed or Invalid one.
func explain(err error, field string) error {
	var te *stdjson.UnmarshalTypeError
	if errors.As(err, &te) {
		return &Invalid{join(field, te.Field), fmt.Sprintf("must be %s, not the JSON %s", typeName(te.Type), te.Value)}
	}
	var se *stdjson.SyntaxError
	if errors.As(err, &se) {
		if se.Offset == 0 {
			return &Malformed{"trailing data after the JSON value"}
		}
		return &Malformed{fmt.Sprintf("%v (at byte %d)", se, se.Offset)}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &Malformed{"unexpected end of the body"}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return &Invalid{field, "unknown field " + name + " (no additional properties are allowed)"}
	}
	return &Invalid{field, err.Error()}
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

func join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "." + b
}

// ModelInput is a sequence of token ids.
type ModelInput struct {
	TokenIDs []int `json:"token_ids"`
}

// Check applies the model-input rules: 1 to 32768 ids, each >= 0.
func (m *ModelInput) Check(field string) error {
	if m == nil {
		return &Invalid{field, "is required"}
	}
	if n := len(m.TokenIDs); n < 1 || n > MaxTokenIDs {
		return &Invalid{field + ".token_ids", fmt.Sprintf("must have 1 to %d items, has %d", MaxTokenIDs, n)}
	}
	for i, t := range m.TokenIDs {
		if t < 0 {
			return &Invalid{fmt.Sprintf("%s.token_ids[%d]", field, i), "must be >= 0"}
		}
	}
	return nil
}

// LossInputs are one datum's loss inputs, aligned with its model input.
type LossInputs struct {
	TargetTokens []int     `json:"target_tokens"`
	Weights      []float64 `json:"weights,omitempty"`
	Logprobs     []float64 `json:"logprobs,omitempty"`
	Advantages   []float64 `json:"advantages,omitempty"`
}

// Datum is one training sequence.
type Datum struct {
	ModelInput   *ModelInput `json:"model_input"`
	LossFnInputs *LossInputs `json:"loss_fn_inputs"`
}

// Batch is the payload of forward and forward_backward.
type Batch struct {
	Data         []Datum            `json:"data"`
	LossFn       string             `json:"loss_fn"`
	LossFnConfig map[string]float64 `json:"loss_fn_config,omitempty"`
}

// Adam holds AdamW's hyperparameters; an absent field takes the default.
type Adam struct {
	LearningRate *float64 `json:"learning_rate"`
	Beta1        *float64 `json:"beta1"`
	Beta2        *float64 `json:"beta2"`
	Eps          *float64 `json:"eps"`
	WeightDecay  *float64 `json:"weight_decay"`
	GradClipNorm *float64 `json:"grad_clip_norm"`
}

// Step is the payload of optim_step.
type Step struct {
	AdamParams *Adam `json:"adam_params"`
}

// Params are the step's optimizer parameters with defaults filled in.
func (s *Step) Params() optim.Params {
	p := optim.Defaults()
	if a := s.AdamParams; a != nil {
		for _, f := range []struct {
			src *float64
			dst *float64
		}{{a.LearningRate, &p.LR}, {a.Beta1, &p.Beta1}, {a.Beta2, &p.Beta2}, {a.Eps, &p.Eps}, {a.WeightDecay, &p.WeightDecay}, {a.GradClipNorm, &p.GradClipNorm}} {
			if f.src != nil {
				*f.dst = *f.src
			}
		}
	}
	return p
}

// Parsed is a decoded, schema-checked payload: *Batch, *Step, *Save, *Load,
// *Export, *SaveWeights, *SamplePayload or *LogprobsPayload.
type Parsed any

// The parsers below strictly decode and schema-check one kind's payload
// each (actors' operation-kind table names which parses which). A kind
// whose payload is empty accepts an absent payload or {}.

// orEmpty is raw, or {} for an absent payload.
func orEmpty(raw []byte) []byte {
	if len(raw) == 0 || string(raw) == "null" {
		return []byte("{}")
	}
	return raw
}

// ParseBatch parses forward's and forward_backward's payload.
func ParseBatch(raw []byte) (Parsed, error) {
	raw = orEmpty(raw)
	var b Batch
	if !fastBatch(raw, &b) {
		b = Batch{}
		if err := Strict(raw, &b, "payload"); err != nil {
			return nil, err
		}
	}
	return &b, b.check()
}

// parseAs strictly decodes raw (or {}) into a new T, then applies check
// (nil: none).
func parseAs[T any](raw []byte, check func(*T) error) (Parsed, error) {
	v := new(T)
	if err := Strict(orEmpty(raw), v, "payload"); err != nil {
		return nil, err
	}
	if check != nil {
		if err := check(v); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// ParseStep parses optim_step's payload.
func ParseStep(raw []byte) (Parsed, error) {
	return parseAs(raw, func(s *Step) error {
		if err := s.Params().Validate(); err != nil {
			return &Invalid{"payload.adam_params", err.Error()}
		}
		return nil
	})
}

// ParseSave parses save_state's payload.
func ParseSave(raw []byte) (Parsed, error) {
	return parseAs(raw, func(v *Save) error {
		if len(v.Name) > MaxName {
			return &Invalid{"payload.name", fmt.Sprintf("must be at most %d characters", MaxName)}
		}
		return nil
	})
}

// ParseLoad parses load_state's payload.
func ParseLoad(raw []byte) (Parsed, error) {
	return parseAs(raw, func(v *Load) error {
		if !IsID(CheckpointPrefix, v.CheckpointID) {
			return &Invalid{"payload.checkpoint_id", "is required and must match ^wtc_[0-9a-f]{32}$"}
		}
		return nil
	})
}

// ParseSample parses sample's payload.
func ParseSample(raw []byte) (Parsed, error) { return parseAs(raw, (*SamplePayload).check) }

// ParseLogprobs parses logprobs' payload.
func ParseLogprobs(raw []byte) (Parsed, error) {
	return parseAs(raw, func(v *LogprobsPayload) error {
		if err := v.Input.Check("payload.input"); err != nil {
			return err
		}
		return checkVersion(v.RequiredWeightVersion)
	})
}

// ParseSaveWeights parses save_weights_for_sampler's (empty) payload.
func ParseSaveWeights(raw []byte) (Parsed, error) { return parseAs[SaveWeights](raw, nil) }

// ParseExport parses export_lora's payload.
func ParseExport(raw []byte) (Parsed, error) {
	return parseAs(raw, func(v *Export) error {
		if v.CheckpointID != "" && !IsID(CheckpointPrefix, v.CheckpointID) {
			return &Invalid{"payload.checkpoint_id", "must match ^wtc_[0-9a-f]{32}$"}
		}
		return nil
	})
}

func (b *Batch) check() error {
	if n := len(b.Data); n < 1 || n > MaxDatums {
		return &Invalid{"payload.data", fmt.Sprintf("must have 1 to %d items, has %d", MaxDatums, n)}
	}
	if b.LossFn == "" {
		b.LossFn = "cross_entropy"
	}
	fn, err := loss.New(b.LossFn, b.LossFnConfig)
	if err != nil {
		return &Invalid{"payload.loss_fn", err.Error()}
	}
	for i, d := range b.Data {
		if err := d.check(fn); err != nil {
			var inv *Invalid
			if errors.As(err, &inv) {
				inv.Field = fmt.Sprintf("payload.data[%d]", i) + inv.Field
			}
			return err
		}
	}
	return nil
}

// check applies the datum rules; an Invalid's field is relative to the
// datum (".model_input..."), so that a valid batch formats no paths.
func (d *Datum) check(fn *loss.Fn) error {
	if err := d.ModelInput.Check(".model_input"); err != nil {
		return err
	}
	if d.LossFnInputs == nil {
		return &Invalid{".loss_fn_inputs", "is required"}
	}
	in := d.inputs()
	if err := fn.Check(&in, len(d.ModelInput.TokenIDs)); err != nil {
		return &Invalid{".loss_fn_inputs", err.Error()}
	}
	for j, t := range in.TargetTokens {
		if t < 0 {
			return &Invalid{fmt.Sprintf(".loss_fn_inputs.target_tokens[%d]", j), "must be >= 0"}
		}
	}
	return nil
}

func (d *Datum) inputs() loss.Inputs {
	l := d.LossFnInputs
	return loss.Inputs{TargetTokens: l.TargetTokens, Weights: l.Weights, Logprobs: l.Logprobs, Advantages: l.Advantages}
}

// Datums is the batch as engine input.
func (b *Batch) Datums() []train.Datum {
	out := make([]train.Datum, len(b.Data))
	for i := range b.Data {
		out[i] = train.Datum{ModelInput: b.Data[i].ModelInput.TokenIDs, Loss: b.Data[i].inputs()}
	}
	return out
}

// CheckModel applies the rules that need the run's model: token ids inside
// the vocabulary, sequences inside the context. It returns the engine's
// error (which carries a kerr code).
func CheckModel(p Parsed, c model.Config) error {
	switch p := p.(type) {
	case *SamplePayload:
		q := p.Request()
		return q.Validate(c.Vocab, c.MaxPos)
	case *LogprobsPayload:
		if n := len(p.Input.TokenIDs); n > c.MaxPos {
			return fmt.Errorf("%w: %d tokens, context %d", kerr.ErrTooLong, n, c.MaxPos)
		}
		return sampler.CheckTokens(p.Input.TokenIDs, c.Vocab)
	}
	b, ok := p.(*Batch)
	if !ok {
		return nil
	}
	fn, err := loss.New(b.LossFn, b.LossFnConfig)
	if err != nil {
		return err
	}
	return train.Validate(b.Datums(), fn, c.Vocab, c.MaxPos)
}

// Save is the payload of save_state.
type Save struct {
	Name string `json:"name"` // a label for the caller, up to 200 characters
}

// Load is the payload of load_state.
type Load struct {
	CheckpointID  string `json:"checkpoint_id"`
	WithOptimizer bool   `json:"with_optimizer"` // also restore AdamW's moments and step
}

// Export is the payload of export_lora.
type Export struct {
	CheckpointID string `json:"checkpoint_id"` // export this checkpoint; empty: the run's current weights
}

// SaveWeights is the (empty) payload of save_weights_for_sampler.
type SaveWeights struct{}

// SamplingParams are the spec's sampling parameters.
type SamplingParams struct {
	MaxTokens    *int     `json:"max_tokens"`
	Temperature  *float64 `json:"temperature"`
	TopP         *float64 `json:"top_p"`
	TopK         *int     `json:"top_k"`
	MinP         *float64 `json:"min_p"`
	Seed         *int64   `json:"seed"`
	StopTokenIDs []int    `json:"stop_token_ids"`
}

// SamplePayload is the payload of sample (sampler- or run-scoped).
type SamplePayload struct {
	Prompt                *ModelInput     `json:"prompt"`
	Parameters            *SamplingParams `json:"parameters"`
	NumSamples            *int            `json:"num_samples"`
	IncludePromptLogprobs bool            `json:"include_prompt_logprobs"`
	TopKPromptLogprobs    int             `json:"topk_prompt_logprobs"`
	RequiredWeightVersion *int64          `json:"required_weight_version"`
}

// LogprobsPayload is the payload of logprobs.
type LogprobsPayload struct {
	Input                 *ModelInput `json:"input"`
	RequiredWeightVersion *int64      `json:"required_weight_version"`
}

// Request is the sample payload as the engine's request.
func (p *SamplePayload) Request() sampler.Request {
	q := p.Parameters
	params := sampler.Params{MaxTokens: *q.MaxTokens, Temperature: *q.Temperature, TopP: *q.TopP, TopK: *q.TopK, StopTokenIDs: q.StopTokenIDs}
	if q.MinP != nil {
		params.MinP = *q.MinP
	}
	if q.Seed != nil {
		seed := uint64(*q.Seed)
		params.Seed = &seed
	}
	return sampler.Request{Prompt: p.Prompt.TokenIDs, Params: params, NumSamples: *p.NumSamples,
		IncludePromptLogprobs: p.IncludePromptLogprobs, TopKPromptLogprobs: p.TopKPromptLogprobs}
}

// Required is the weight version a sampler operation waits for, if any.
func Required(p Parsed) *int64 {
	switch p := p.(type) {
	case *SamplePayload:
		return p.RequiredWeightVersion
	case *LogprobsPayload:
		return p.RequiredWeightVersion
	}
	return nil
}

// check applies the schema's required fields, then the sampler's ranges
// (sampler.Request.CheckRanges, their one home).
func (p *SamplePayload) check() error {
	if err := p.Prompt.Check("payload.prompt"); err != nil {
		return err
	}
	q := p.Parameters
	switch {
	case q == nil:
		return &Invalid{"payload.parameters", "is required"}
	case p.NumSamples == nil:
		return &Invalid{"payload.num_samples", "is required"}
	case q.MaxTokens == nil:
		return &Invalid{"payload.parameters.max_tokens", "is required"}
	case q.Temperature == nil:
		return &Invalid{"payload.parameters.temperature", "is required"}
	case q.TopP == nil:
		return &Invalid{"payload.parameters.top_p", "is required"}
	case q.TopK == nil:
		return &Invalid{"payload.parameters.top_k", "is required"}
	case q.Seed != nil && *q.Seed < 0:
		return &Invalid{"payload.parameters.seed", "must be >= 0 or null"}
	}
	req := p.Request()
	if err := req.CheckRanges(); err != nil {
		return &Invalid{"payload." + err.Field, err.Reason}
	}
	return checkVersion(p.RequiredWeightVersion)
}

func checkVersion(v *int64) error {
	if v != nil && *v < 0 {
		return &Invalid{"payload.required_weight_version", "must be >= 0 or null"}
	}
	return nil
}

// MaxName bounds a checkpoint's name.
const MaxName = 200

// CheckpointPrefix starts every checkpoint id.
const CheckpointPrefix = "wtc_"

// IsID reports whether s is an identifier with prefix: the prefix then 32
// lowercase hex digits.
func IsID(prefix, s string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	return ok && len(rest) == 32 && isHex(rest)
}

// IsUUID reports whether s is UUID-shaped, in lowercase (an artifact id).
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, part := range strings.Split(s, "-") {
		if len(part) != []int{8, 4, 4, 4, 12}[i] || !isHex(part) {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
