package client

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/wts-project/wts/http/jcs"
	"github.com/wts-project/wts/kernels/tokenizer"
)

// SessionOptions is a session's creation request. RequestID names it for
// retries; empty, the client makes one.
type SessionOptions struct {
	RequestID       string          `json:"request_id"`
	Provider        string          `json:"provider,omitempty"`
	Preferences     []string        `json:"provider_preferences,omitempty"`
	Funding         string          `json:"funding_preference,omitempty"`
	CredentialID    string          `json:"credential_id,omitempty"`
	MaxCostMicroUSD int64           `json:"max_cost_microusd,omitempty"`
	IdleTTLSeconds  int64           `json:"idle_ttl_s,omitempty"`
	Metadata        json.RawMessage `json:"metadata,omitempty"`
}

// CreateSession creates a session (or returns the one an earlier request
// with the same RequestID made).
func (c *Client) CreateSession(ctx context.Context, o SessionOptions) (*Session, error) {
	if o.RequestID == "" {
		o.RequestID = "session-" + nonce()
	}
	var s Session
	return &s, c.do(ctx, "POST", "/v1/training/sessions", o, &s)
}

// GetSession reads a session.
func (c *Client) GetSession(ctx context.Context, id string) (*Session, error) {
	var s Session
	return &s, c.do(ctx, "GET", "/v1/training/sessions/"+url.PathEscape(id), nil, &s)
}

// Heartbeat extends a session's lease.
func (c *Client) Heartbeat(ctx context.Context, id string) (*Session, error) {
	var s Session
	return &s, c.do(ctx, "POST", "/v1/training/sessions/"+url.PathEscape(id)+"/heartbeat", map[string]string{"request_id": "hb-" + nonce()}, &s)
}

// CloseSession closes a session: its run is cancelled if it has not
// ended, and its unused reservation returns to the ledger.
func (c *Client) CloseSession(ctx context.Context, id string) (*Session, error) {
	var s Session
	return &s, c.do(ctx, "POST", "/v1/training/sessions/"+url.PathEscape(id)+"/close", map[string]string{"request_id": "close-" + id}, &s)
}

// KeepAlive heartbeats session id every interval until ctx ends, so that
// its lease does not run out while the caller computes between
// operations. It returns the error that stopped it (ctx's when ctx ended).
func (c *Client) KeepAlive(ctx context.Context, id string, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if _, err := c.Heartbeat(ctx, id); err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}

// Page is a page of the caller's sessions or runs, newest first; pass
// NextAfter back for the next page (nil: there are none).
type Page[T any] struct {
	Items     []T     `json:"items"`
	NextAfter *string `json:"next_after"`
}

// ListSessions pages the caller's sessions, newest first, after the
// session after ("": from the newest).
func (c *Client) ListSessions(ctx context.Context, after string, limit int) (*Page[Session], error) {
	var p Page[Session]
	return &p, c.do(ctx, "GET", listPath("sessions", after, limit), nil, &p)
}

// ListRuns pages the caller's runs, newest first, after the run after.
func (c *Client) ListRuns(ctx context.Context, after string, limit int) (*Page[Run], error) {
	var p Page[Run]
	return &p, c.do(ctx, "GET", listPath("runs", after, limit), nil, &p)
}

func listPath(what, after string, limit int) string {
	q := url.Values{"limit": {fmt.Sprint(limit)}}
	if after != "" {
		q.Set("after", after)
	}
	return "/v1/training/" + what + "?" + q.Encode()
}

// Models lists the service's model catalog.
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	var page struct {
		Items []Model `json:"items"`
	}
	return page.Items, c.do(ctx, "GET", "/v1/training/models", nil, &page)
}

// Tokenizer fetches a catalog model's tokenizer (for a model whose
// catalog entry says tokenizer: true), to turn text into token ids and
// back on the caller's side.
func (c *Client) Tokenizer(ctx context.Context, model string) (*tokenizer.Tokenizer, error) {
	var raw json.RawMessage
	if err := c.do(ctx, "GET", "/v1/training/models/"+url.PathEscape(model)+"/tokenizer", nil, &raw); err != nil {
		return nil, err
	}
	return tokenizer.Parse(raw)
}

// Model looks a catalog model up by name.
func (c *Client) Model(ctx context.Context, name string) (*Model, error) {
	models, err := c.Models(ctx)
	if err != nil {
		return nil, err
	}
	for i := range models {
		if models[i].Name == name {
			return &models[i], nil
		}
	}
	return nil, &Error{Status: 422, Code: "model_not_available", Message: fmt.Sprintf("the catalog has no model %q", name)}
}

// GetOperation reads an operation.
func (c *Client) GetOperation(ctx context.Context, id string) (*Operation, error) {
	var op Operation
	return &op, c.do(ctx, "GET", "/v1/training/operations/"+url.PathEscape(id), nil, &op)
}

// GetRun reads a run.
func (c *Client) GetRun(ctx context.Context, id string) (*Run, error) {
	var r Run
	return &r, c.do(ctx, "GET", "/v1/training/runs/"+url.PathEscape(id), nil, &r)
}

// Metrics reads a run's step records after seq_id after (up to limit) and
// the summary of all of them.
func (c *Client) Metrics(ctx context.Context, runID string, after int64, limit int) (*Metrics, error) {
	var m Metrics
	return &m, c.do(ctx, "GET", fmt.Sprintf("/v1/training/runs/%s/metrics?after_seq=%d&limit=%d", url.PathEscape(runID), after, limit), nil, &m)
}

// Cost reads a session's cost.
func (c *Client) Cost(ctx context.Context, sessionID string) (*Cost, error) {
	var cost Cost
	return &cost, c.do(ctx, "GET", "/v1/training/sessions/"+url.PathEscape(sessionID)+"/cost", nil, &cost)
}

// TrainingOptions is a LoRA run's creation request. An empty
// ModelRevision is the catalog's (GET /v1/training/models); an empty
// RequestID is made by the client.
type TrainingOptions struct {
	RequestID     string          `json:"request_id"`
	BaseModel     string          `json:"base_model"`
	ModelRevision string          `json:"model_revision"`
	LoRA          LoRA            `json:"lora"`
	CheckpointID  string          `json:"checkpoint_id,omitempty"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`
}

// CreateLoRATrainingClient creates session sessionID's run and returns its
// training client.
func (c *Client) CreateLoRATrainingClient(ctx context.Context, sessionID string, o TrainingOptions) (*TrainingClient, error) {
	if o.ModelRevision == "" {
		m, err := c.Model(ctx, o.BaseModel)
		if err != nil {
			return nil, err
		}
		o.ModelRevision = m.Revision
	}
	if o.RequestID == "" {
		o.RequestID = "run-" + nonce()
	}
	var r Run
	if err := c.do(ctx, "POST", "/v1/training/sessions/"+url.PathEscape(sessionID)+"/runs", o, &r); err != nil {
		return nil, err
	}
	return &TrainingClient{Run: r, seq: sequence{c: c, path: "/v1/training/runs/" + url.PathEscape(r.ID) + "/operations", next: r.NextSeqID, key: nonce()}}, nil
}

// TrainingClient resumes the training client of an existing run, at its
// next seq_id.
func (c *Client) TrainingClient(ctx context.Context, runID string) (*TrainingClient, error) {
	r, err := c.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	return &TrainingClient{Run: *r, seq: sequence{c: c, path: "/v1/training/runs/" + url.PathEscape(r.ID) + "/operations", next: r.NextSeqID, key: nonce()}}, nil
}

// SamplingClient is the client of sampler id (a run's sampler_id, or
// save_weights_for_sampler's), at its next seq_id.
func (c *Client) SamplingClient(ctx context.Context, id string) (*SamplingClient, error) {
	var s Sampler
	if err := c.do(ctx, "GET", "/v1/training/samplers/"+url.PathEscape(id), nil, &s); err != nil {
		return nil, err
	}
	return &SamplingClient{Sampler: s, seq: sequence{c: c, path: "/v1/training/samplers/" + url.PathEscape(id) + "/operations", next: s.NextSeqID, key: nonce()}}, nil
}

// sequence submits a run's (or sampler's) operations in seq_id order:
// each submission is durable when it returns, so the next may follow.
type sequence struct {
	c    *Client
	path string
	key  string // this client's prefix of idempotency keys

	mu   sync.Mutex
	next int64
}

// submit submits the next operation and returns its handle. A retry
// resends the same seq_id, idempotency key and hash, so an attempt that
// got through is not applied twice.
func (s *sequence) submit(ctx context.Context, kind string, payload any) (*Operation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	body, err := OperationBody(s.next, fmt.Sprintf("%s-%d", s.key, s.next), kind, payload)
	if err != nil {
		return nil, err
	}
	var op Operation
	if err := s.c.do(ctx, "POST", s.path, body, &op); err != nil {
		return nil, err
	}
	s.next++
	return &op, nil
}

// OperationBody is an operation's envelope with its request_hash: the
// SHA-256 of the envelope's RFC 8785 form.
func OperationBody(seq int64, key, kind string, payload any) (json.RawMessage, error) {
	p, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("encode %s payload: %w", kind, err)
	}
	env := map[string]any{"seq_id": seq, "idempotency_key": key, "kind": kind, "payload": json.RawMessage(p)}
	raw, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	canon, err := jcs.Canonical(raw, "")
	if err != nil {
		return nil, fmt.Errorf("canonical %s body: %w", kind, err)
	}
	sum := sha256.Sum256(canon)
	env["request_hash"] = hex.EncodeToString(sum[:])
	return json.Marshal(env)
}

// Future is an accepted operation whose result comes later.
type Future[T any] struct {
	c  *Client
	Op *Operation
}

// Poll reads the operation as it is now.
func (f *Future[T]) Poll(ctx context.Context) (*Operation, error) {
	op, err := f.c.GetOperation(ctx, f.Op.ID)
	if err == nil {
		f.Op = op
	}
	return op, err
}

// Result waits for the operation to end and decodes its result; an
// operation that failed or was cancelled is an *OperationError.
func (f *Future[T]) Result(ctx context.Context) (T, error) {
	var out T
	op, err := f.c.Wait(ctx, f.Op, nil)
	if err != nil {
		return out, err
	}
	f.Op = op
	if f.Op.Status != "succeeded" {
		e := &OperationError{Op: f.Op}
		if f.Op.ErrorCode != nil {
			e.Code = *f.Op.ErrorCode
		}
		if f.Op.ErrorMessage != nil {
			e.Message = *f.Op.ErrorMessage
		}
		return out, e
	}
	if err := json.Unmarshal(f.Op.Result, &out); err != nil {
		return out, fmt.Errorf("decode %s result: %w", f.Op.Kind, err)
	}
	return out, nil
}

// Wait polls op until it ends (quickly at first, then every second; see
// WithPolling), calling seen, when set, with each reading.
func (c *Client) Wait(ctx context.Context, op *Operation, seen func(*Operation)) (*Operation, error) {
	wait := c.poll[0]
	for !op.Ended() {
		select {
		case <-ctx.Done():
			return op, ctx.Err()
		case <-time.After(wait):
		}
		next, err := c.GetOperation(ctx, op.ID)
		if err != nil {
			return op, err
		}
		if op = next; seen != nil {
			seen(op)
		}
		wait = min(wait*3/2, c.poll[1])
	}
	return op, nil
}

func future[T any](c *Client, op *Operation, err error) (*Future[T], error) {
	if err != nil {
		return nil, err
	}
	return &Future[T]{c: c, Op: op}, nil
}

// TrainingClient submits a run's operations in order. Its calls return
// when the operation is durable, with a future of its result.
type TrainingClient struct {
	Run Run
	seq sequence
}

// batch is forward's and forward_backward's payload.
type batch struct {
	Data   []Datum            `json:"data"`
	LossFn string             `json:"loss_fn,omitempty"`
	Config map[string]float64 `json:"loss_fn_config,omitempty"`
}

// ForwardBackward computes the loss lossFn ("": cross_entropy) over data
// and accumulates its gradients; config is the loss's (clip thresholds,
// beta), nil for its defaults.
func (t *TrainingClient) ForwardBackward(ctx context.Context, data []Datum, lossFn string, config map[string]float64) (*Future[ForwardResult], error) {
	op, err := t.seq.submit(ctx, "forward_backward", batch{data, lossFn, config})
	return future[ForwardResult](t.seq.c, op, err)
}

// Forward computes the loss and logprobs of data without gradients.
func (t *TrainingClient) Forward(ctx context.Context, data []Datum, lossFn string, config map[string]float64) (*Future[ForwardResult], error) {
	op, err := t.seq.submit(ctx, "forward", batch{data, lossFn, config})
	return future[ForwardResult](t.seq.c, op, err)
}

// OptimStep applies the accumulated gradients with AdamW.
func (t *TrainingClient) OptimStep(ctx context.Context, p AdamParams) (*Future[OptimResult], error) {
	op, err := t.seq.submit(ctx, "optim_step", map[string]any{"adam_params": p})
	return future[OptimResult](t.seq.c, op, err)
}

// SaveState writes a checkpoint of the adapter and the optimizer's state.
func (t *TrainingClient) SaveState(ctx context.Context, name string) (*Future[CheckpointResult], error) {
	p := map[string]string{}
	if name != "" {
		p["name"] = name
	}
	op, err := t.seq.submit(ctx, "save_state", p)
	return future[CheckpointResult](t.seq.c, op, err)
}

// LoadState replaces the adapter with a checkpoint's (and the optimizer's
// state with its, when withOptimizer).
func (t *TrainingClient) LoadState(ctx context.Context, checkpointID string, withOptimizer bool) (*Future[CheckpointResult], error) {
	op, err := t.seq.submit(ctx, "load_state", map[string]any{"checkpoint_id": checkpointID, "with_optimizer": withOptimizer})
	return future[CheckpointResult](t.seq.c, op, err)
}

// SaveWeightsForSampler saves the current weights as the run's sampler's
// next weight version.
func (t *TrainingClient) SaveWeightsForSampler(ctx context.Context) (*Future[WeightsResult], error) {
	op, err := t.seq.submit(ctx, "save_weights_for_sampler", map[string]any{})
	return future[WeightsResult](t.seq.c, op, err)
}

// ExportLoRA writes the adapter (a checkpoint's, or "" for the current
// one) as a PEFT artifact.
func (t *TrainingClient) ExportLoRA(ctx context.Context, checkpointID string) (*Future[ExportResult], error) {
	p := map[string]string{}
	if checkpointID != "" {
		p["checkpoint_id"] = checkpointID
	}
	op, err := t.seq.submit(ctx, "export_lora", p)
	return future[ExportResult](t.seq.c, op, err)
}

// Sample samples the run's current weights (a run-scoped sample: the
// service saves a weight version when the trainer moved).
func (t *TrainingClient) Sample(ctx context.Context, r SampleRequest) (*Future[SampleResult], error) {
	op, err := t.seq.submit(ctx, "sample", r)
	return future[SampleResult](t.seq.c, op, err)
}

// Finish finishes the run once its queued operations are done.
func (t *TrainingClient) Finish(ctx context.Context) (*Future[json.RawMessage], error) {
	op, err := t.seq.c.FinishRun(ctx, t.Run.ID)
	return future[json.RawMessage](t.seq.c, op, err)
}

// SamplingClient is the client of the run's sampler, which exists once
// the run saved weights for it (or sampled).
func (t *TrainingClient) SamplingClient(ctx context.Context) (*SamplingClient, error) {
	r, err := t.seq.c.GetRun(ctx, t.Run.ID)
	if err != nil {
		return nil, err
	}
	if r.SamplerID == "" {
		return nil, fmt.Errorf("run %s has no sampler yet: save weights for it first", r.ID)
	}
	return t.seq.c.SamplingClient(ctx, r.SamplerID)
}

// SamplingClient submits a sampler's operations in order.
type SamplingClient struct {
	Sampler Sampler
	seq     sequence
}

// Sample samples the sampler's weights (at RequiredWeightVersion or
// later, when set).
func (s *SamplingClient) Sample(ctx context.Context, r SampleRequest) (*Future[SampleResult], error) {
	op, err := s.seq.submit(ctx, "sample", r)
	return future[SampleResult](s.seq.c, op, err)
}

// ComputeLogprobs scores tokens: the logprob of each given the ones
// before it (the first has none).
func (s *SamplingClient) ComputeLogprobs(ctx context.Context, tokens []int, requiredWeightVersion *int64) (*Future[LogprobsResult], error) {
	p := map[string]any{"input": ModelInput{TokenIDs: tokens}}
	if requiredWeightVersion != nil {
		p["required_weight_version"] = *requiredWeightVersion
	}
	op, err := s.seq.submit(ctx, "logprobs", p)
	return future[LogprobsResult](s.seq.c, op, err)
}

// nonce is 16 random hex digits: the client's idempotency key prefix, and
// request_ids it makes.
func nonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
