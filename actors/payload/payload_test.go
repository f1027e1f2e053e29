package payload

import (
	stdjson "encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	json "github.com/goccy/go-json"

	"github.com/wts-project/wts/kernels/model"
)

func TestStrictErrors(t *testing.T) {
	cases := []struct {
		body  string
		field string // "" for Malformed
		has   string
	}{
		{`{"data":[{"model_input":{"token_ids":[1,2.5]}}]}`, "payload.data.model_input.token_ids", "integer"},
		{`{"data":[{"model_input":{"token_ids":"x"}}]}`, "payload.data.model_input.token_ids", "array"},
		{`{"data":[],"extra":1}`, "payload", `unknown field "extra"`},
		{`{"data":[{"model_input":{"tokens":[1]}}]}`, "payload", `unknown field "tokens"`},
		{`{"data":[]`, "", "end"},
		{`{"data":[]} 1`, "", "trailing"},
	}
	for _, c := range cases {
		var b Batch
		err := Strict([]byte(c.body), &b, "payload")
		var inv *Invalid
		var mal *Malformed
		switch {
		case c.field == "" && !errors.As(err, &mal):
			t.Errorf("%s: want malformed, got %v", c.body, err)
		case c.field != "" && (!errors.As(err, &inv) || inv.Field != c.field):
			t.Errorf("%s: want invalid at %s, got %v", c.body, c.field, err)
		case !strings.Contains(err.Error(), c.has):
			t.Errorf("%s: %q does not say %q", c.body, err, c.has)
		}
	}
}

func TestParseBatch(t *testing.T) {
	p, err := ParseBatch([]byte(`{"data":[{"model_input":{"token_ids":[1,2]},"loss_fn_inputs":{"target_tokens":[2,3],"weights":[1,0.5]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b := p.(*Batch)
	if b.LossFn != "cross_entropy" || len(b.Datums()) != 1 || b.Datums()[0].Loss.Weights[1] != 0.5 {
		t.Fatalf("%+v", b)
	}
	for _, bad := range []string{
		`{"data":[]}`,
		`{"data":[{"model_input":{"token_ids":[1,-2]},"loss_fn_inputs":{"target_tokens":[2,3]}}]}`,
		`{"data":[{"model_input":{"token_ids":[1,2]},"loss_fn_inputs":{"target_tokens":[2]}}]}`,
		`{"data":[{"model_input":{"token_ids":[1,2]}}]}`,
	} {
		var inv *Invalid
		if _, err := ParseBatch([]byte(bad)); !errors.As(err, &inv) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if s, err := ParseStep(nil); err != nil || s.(*Step).Params().LR != 1e-4 {
		t.Errorf("empty optim_step: %v %v", s, err)
	}
}

// FuzzParse: any payload either parses or is refused with an Invalid or a
// Malformed error; nothing panics.
func FuzzParse(f *testing.F) {
	f.Add(`{"data":[{"model_input":{"token_ids":[1,2]},"loss_fn_inputs":{"target_tokens":[2,3]}}],"loss_fn":"ppo"}`)
	f.Add(`{"adam_params":{"learning_rate":0.1,"beta1":0.5}}`)
	f.Add(`{"prompt":{"token_ids":[1,2]},"parameters":{"max_tokens":4,"temperature":0.5,"top_p":1,"top_k":-1,"seed":3,"stop_token_ids":[2]},"num_samples":2,"required_weight_version":1}`)
	f.Add(`{"input":{"token_ids":[5]},"required_weight_version":null}`)
	f.Add(`{"checkpoint_id":"wtc_0123456789abcdef0123456789abcdef","with_optimizer":true}`)
	f.Add(`{"name":"x"}`)
	cfg := model.Presets["tiny"]
	f.Fuzz(func(t *testing.T, body string) {
		for kind, parse := range map[string]func([]byte) (Parsed, error){ForwardBackward: ParseBatch, OptimStep: ParseStep, Sample: ParseSample,
			Logprobs: ParseLogprobs, SaveState: ParseSave, LoadState: ParseLoad, ExportLoRA: ParseExport, SaveWeightsForSampler: ParseSaveWeights} {
			p, err := parse([]byte(body))
			var inv *Invalid
			var mal *Malformed
			if err != nil && !errors.As(err, &inv) && !errors.As(err, &mal) {
				t.Fatalf("%s %q: unclassified error %v", kind, body, err)
			}
			if err == nil {
				CheckModel(p, cfg) // must not panic on anything Parse let through
			}
		}
	})
}

// TestSamplerPayloads holds the sample and logprobs payloads to the spec's
// schema: required fields, ranges, no additional properties.
func TestSamplerPayloads(t *testing.T) {
	ok := `{"prompt":{"token_ids":[1,2]},"parameters":{"max_tokens":4,"temperature":0,"top_p":1,"top_k":-1},"num_samples":1}`
	p, err := ParseSample([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if q := p.(*SamplePayload).Request(); q.Params.MaxTokens != 4 || q.Params.Seed != nil || q.NumSamples != 1 || Required(p) != nil {
		t.Errorf("request %+v", q)
	}
	for name, body := range map[string]string{
		"no prompt":           `{"parameters":{"max_tokens":4,"temperature":0,"top_p":1,"top_k":-1},"num_samples":1}`,
		"no parameters":       `{"prompt":{"token_ids":[1]},"num_samples":1}`,
		"no num_samples":      `{"prompt":{"token_ids":[1]},"parameters":{"max_tokens":4,"temperature":0,"top_p":1,"top_k":-1}}`,
		"65 samples":          `{"prompt":{"token_ids":[1]},"parameters":{"max_tokens":4,"temperature":0,"top_p":1,"top_k":-1},"num_samples":65}`,
		"no temperature":      `{"prompt":{"token_ids":[1]},"parameters":{"max_tokens":4,"top_p":1,"top_k":-1},"num_samples":1}`,
		"temperature 3":       `{"prompt":{"token_ids":[1]},"parameters":{"max_tokens":4,"temperature":3,"top_p":1,"top_k":-1},"num_samples":1}`,
		"max_tokens 4097":     `{"prompt":{"token_ids":[1]},"parameters":{"max_tokens":4097,"temperature":0,"top_p":1,"top_k":-1},"num_samples":1}`,
		"top_k -2":            `{"prompt":{"token_ids":[1]},"parameters":{"max_tokens":4,"temperature":0,"top_p":1,"top_k":-2},"num_samples":1}`,
		"negative seed":       `{"prompt":{"token_ids":[1]},"parameters":{"max_tokens":4,"temperature":0,"top_p":1,"top_k":-1,"seed":-1},"num_samples":1}`,
		"extra parameter":     `{"prompt":{"token_ids":[1]},"parameters":{"max_tokens":4,"temperature":0,"top_p":1,"top_k":-1,"beam":2},"num_samples":1}`,
		"extra field":         `{"prompt":{"token_ids":[1]},"parameters":{"max_tokens":4,"temperature":0,"top_p":1,"top_k":-1},"num_samples":1,"n":1}`,
		"topk 101":            `{"prompt":{"token_ids":[1]},"parameters":{"max_tokens":4,"temperature":0,"top_p":1,"top_k":-1},"num_samples":1,"topk_prompt_logprobs":101}`,
		"negative version":    `{"prompt":{"token_ids":[1]},"parameters":{"max_tokens":4,"temperature":0,"top_p":1,"top_k":-1},"num_samples":1,"required_weight_version":-1}`,
		"257 stop tokens":     `{"prompt":{"token_ids":[1]},"parameters":{"max_tokens":4,"temperature":0,"top_p":1,"top_k":-1,"stop_token_ids":[` + strings.Repeat("1,", 256) + `1]},"num_samples":1}`,
		"negative stop token": `{"prompt":{"token_ids":[1]},"parameters":{"max_tokens":4,"temperature":0,"top_p":1,"top_k":-1,"stop_token_ids":[-1]},"num_samples":1}`,
		"empty prompt":        `{"prompt":{"token_ids":[]},"parameters":{"max_tokens":4,"temperature":0,"top_p":1,"top_k":-1},"num_samples":1}`,
	} {
		var inv *Invalid
		if _, err := ParseSample([]byte(body)); !errors.As(err, &inv) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, body := range map[string]string{
		"no input":    `{"required_weight_version":1}`,
		"extra field": `{"input":{"token_ids":[1]},"top":1}`,
		"bad version": `{"input":{"token_ids":[1]},"required_weight_version":-3}`,
	} {
		var inv *Invalid
		if _, err := ParseLogprobs([]byte(body)); !errors.As(err, &inv) {
			t.Errorf("logprobs %s: %v", name, err)
		}
	}
	if p, err := ParseLogprobs([]byte(`{"input":{"token_ids":[1,2]},"required_weight_version":2}`)); err != nil || *Required(p) != 2 {
		t.Errorf("logprobs: %v %v", p, err)
	}
}

// tokenBody is a forward payload with one 32,768-token datum.
func tokenBody() []byte {
	var sb strings.Builder
	sb.WriteString(`{"data":[{"model_input":{"token_ids":[`)
	for i := 0; i < MaxTokenIDs; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprint(&sb, (i*7919)%151936)
	}
	sb.WriteString(`]},"loss_fn_inputs":{"target_tokens":[1]}}]}`)
	return []byte(sb.String())
}

// BenchmarkDecodeTokens compares the JSON decoders on the largest model
// input the API takes (the reason Strict decodes with goccy/go-json, and
// fastBatch scans plain bodies before it).
func BenchmarkDecodeTokens(b *testing.B) {
	body := tokenBody()
	for _, d := range []struct {
		name   string
		decode func([]byte, any) error
	}{{"encoding-json", stdjson.Unmarshal}, {"goccy-go-json", json.Unmarshal}, {"strict", func(raw []byte, v any) error { return Strict(raw, v, "") }},
		{"fast", func(raw []byte, v any) error {
			if !fastBatch(raw, v.(*Batch)) {
				return fmt.Errorf("fastBatch refused the body")
			}
			return nil
		}}} {
		b.Run(d.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var v Batch
				if err := d.decode(body, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
