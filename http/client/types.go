package client

import (
	"encoding/json"
	"time"
)

// Session is a session as the service shows it.
type Session struct {
	ID              string          `json:"id"`
	Status          string          `json:"status"`
	Provider        string          `json:"provider"`
	FundingSource   string          `json:"funding_source"`
	LeaseEpoch      int64           `json:"lease_epoch"`
	LeaseExpiresAt  time.Time       `json:"lease_expires_at"`
	IdleTTLSeconds  int64           `json:"idle_ttl_s"`
	MaxCostMicroUSD *int64          `json:"max_cost_microusd"`
	ErrorCode       string          `json:"error_code"`
	RunID           string          `json:"run_id"`
	Capability      json.RawMessage `json:"capability"`
	Metadata        json.RawMessage `json:"metadata"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
}

// LoRA is a run's adapter. Nil targets take the service's default
// (trained).
type LoRA struct {
	Rank         int   `json:"rank,omitempty"`
	Seed         int64 `json:"seed"`
	TrainMLP     *bool `json:"train_mlp,omitempty"`
	TrainAttn    *bool `json:"train_attn,omitempty"`
	TrainUnembed *bool `json:"train_unembed,omitempty"`
}

// Run is a run as the service shows it.
type Run struct {
	ID                  string          `json:"id"`
	SessionID           string          `json:"session_id"`
	Status              string          `json:"status"`
	BaseModel           string          `json:"base_model"`
	ModelRevision       string          `json:"model_revision"`
	LoRA                LoRA            `json:"lora"`
	CheckpointID        string          `json:"checkpoint_id"`
	NextSeqID           int64           `json:"next_seq_id"`
	SamplerID           string          `json:"sampler_id"`
	LatestWeightVersion int64           `json:"latest_weight_version"`
	ErrorCode           string          `json:"error_code"`
	Retired             bool            `json:"retired"`
	Metadata            json.RawMessage `json:"metadata"`
	CreatedAt           time.Time       `json:"created_at"`
	UpdatedAt           time.Time       `json:"updated_at"`
}

// Sampler is a run's sampler.
type Sampler struct {
	ID                  string `json:"id"`
	RunID               string `json:"run_id"`
	Status              string `json:"status"`
	SyncedWeightVersion int64  `json:"synced_weight_version"`
	NextSeqID           int64  `json:"next_seq_id"`
	ErrorCode           string `json:"error_code"`
}

// Operation is an operation handle; Result holds its kind's result once
// it succeeded.
type Operation struct {
	ID           string          `json:"id"`
	SessionID    string          `json:"session_id"`
	RunID        string          `json:"run_id"`
	SeqID        int64           `json:"seq_id"`
	Kind         string          `json:"kind"`
	Status       string          `json:"status"`
	Result       json.RawMessage `json:"result"`
	ErrorCode    *string         `json:"error_code"`
	ErrorMessage *string         `json:"error_message"`
	Progress     *Progress       `json:"progress"`
	CreatedAt    time.Time       `json:"created_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
}

// Progress is an executing operation's progress.
type Progress struct {
	TokensDone     int     `json:"tokens_done"`
	TokensTotal    int     `json:"tokens_total"`
	TokensPerS     float64 `json:"tokens_per_s"`
	SequencesDone  *int    `json:"sequences_done"`
	SequencesTotal *int    `json:"sequences_total"`
}

// Ended reports whether the operation reached its end (succeeded, failed
// or cancelled).
func (o *Operation) Ended() bool {
	return o.Status == "succeeded" || o.Status == "failed" || o.Status == "cancelled"
}

// OperationError is an operation that failed or was cancelled: its code
// (docs/errors.md, "Codes on operations and runs") and message.
type OperationError struct {
	Op      *Operation
	Code    string
	Message string
}

func (e *OperationError) Error() string {
	return "wts: operation " + e.Op.ID + " (" + e.Op.Kind + ") " + e.Op.Status + ": " + e.Code + ": " + e.Message
}

// Model is a catalog model.
type Model struct {
	Name         string   `json:"name"`
	Revision     string   `json:"revision"`
	Architecture string   `json:"architecture"`
	Parameters   int64    `json:"parameters"`
	MaxSeqLen    int      `json:"max_seq_len"`
	VocabSize    int      `json:"vocab_size"`
	HiddenSize   int      `json:"hidden_size"`
	NumLayers    int      `json:"num_layers"`
	Tokenizer    bool     `json:"tokenizer"`
	Weights      string   `json:"weights"` // f32, bf16 or f16: how the base's weights are kept
	Providers    []string `json:"providers"`
}

// Datum is one training example: the model's input tokens and the loss
// inputs aligned with them position by position.
type Datum struct {
	ModelInput   ModelInput `json:"model_input"`
	LossFnInputs LossInputs `json:"loss_fn_inputs"`
}

// ModelInput is a sequence of token ids.
type ModelInput struct {
	TokenIDs []int `json:"token_ids"`
}

// LossInputs are a datum's loss inputs: targets, and for the RL losses
// the sampler's logprobs and the advantages.
type LossInputs struct {
	TargetTokens []int     `json:"target_tokens"`
	Weights      []float64 `json:"weights,omitempty"`
	Logprobs     []float64 `json:"logprobs,omitempty"`
	Advantages   []float64 `json:"advantages,omitempty"`
}

// NextTokenDatum is the datum that trains tokens to predict each next
// one: input tokens[:n-1], targets tokens[1:], with weights (nil: all 1)
// aligned with the targets.
func NextTokenDatum(tokens []int, weights []float64) Datum {
	return Datum{ModelInput: ModelInput{TokenIDs: tokens[:len(tokens)-1]}, LossFnInputs: LossInputs{TargetTokens: tokens[1:], Weights: weights}}
}

// ForwardResult is the result of forward and forward_backward.
type ForwardResult struct {
	LossFnOutputs []struct {
		Logprobs []float64 `json:"logprobs"`
		Loss     float64   `json:"loss"`
	} `json:"loss_fn_outputs"`
	Metrics map[string]float64 `json:"metrics"`
}

// AdamParams are optim_step's AdamW parameters; zero fields take the
// service's defaults.
type AdamParams struct {
	LearningRate float64 `json:"learning_rate,omitempty"`
	Beta1        float64 `json:"beta1,omitempty"`
	Beta2        float64 `json:"beta2,omitempty"`
	Eps          float64 `json:"eps,omitempty"`
	WeightDecay  float64 `json:"weight_decay,omitempty"`
	GradClipNorm float64 `json:"grad_clip_norm,omitempty"`
}

// OptimResult is the result of optim_step.
type OptimResult struct {
	Metrics map[string]float64 `json:"metrics"`
}

// CheckpointResult is the result of save_state and load_state.
type CheckpointResult struct {
	CheckpointID  string `json:"checkpoint_id"`
	Step          int64  `json:"step"`
	SizeBytes     int64  `json:"size_bytes"`
	WithOptimizer bool   `json:"with_optimizer"`
}

// WeightsResult is the result of save_weights_for_sampler.
type WeightsResult struct {
	SamplerID     string `json:"sampler_id"`
	WeightVersion int64  `json:"weight_version"`
}

// ExportResult is the result of export_lora.
type ExportResult struct {
	ArtifactID string `json:"artifact_id"`
	Checksum   string `json:"checksum"`
	SizeBytes  int64  `json:"size_bytes"`
}

// SamplingParams are a sample's decoding parameters. TopK -1 (or 0) is
// off; Temperature 0 is greedy.
type SamplingParams struct {
	MaxTokens    int     `json:"max_tokens"`
	Temperature  float64 `json:"temperature"`
	TopP         float64 `json:"top_p"`
	TopK         int     `json:"top_k"`
	MinP         float64 `json:"min_p,omitempty"`
	Seed         *int64  `json:"seed,omitempty"`
	StopTokenIDs []int   `json:"stop_token_ids,omitempty"`
}

// SampleRequest is a sample: num_samples continuations of a prompt.
type SampleRequest struct {
	Prompt                ModelInput     `json:"prompt"`
	Parameters            SamplingParams `json:"parameters"`
	NumSamples            int            `json:"num_samples"`
	IncludePromptLogprobs bool           `json:"include_prompt_logprobs,omitempty"`
	TopKPromptLogprobs    int            `json:"topk_prompt_logprobs,omitempty"`
	// RequiredWeightVersion makes a sampler wait for that weight version
	// of its run (a sampler's sample only).
	RequiredWeightVersion *int64 `json:"required_weight_version,omitempty"`
}

// SampleResult is the result of sample.
type SampleResult struct {
	Sequences []struct {
		Tokens     []int     `json:"tokens"`
		Logprobs   []float64 `json:"logprobs"`
		StopReason string    `json:"stop_reason"`
	} `json:"sequences"`
	PromptLogprobs []*float64 `json:"prompt_logprobs"`
	WeightVersion  int64      `json:"weight_version"`
}

// LogprobsResult is the result of logprobs: one per input token, the
// first nil.
type LogprobsResult struct {
	Logprobs      []*float64 `json:"logprobs"`
	WeightVersion int64      `json:"weight_version"`
}

// Metrics is a run's training metrics: a page of step records and the
// summary over all of them.
type Metrics struct {
	Items []struct {
		SeqID      int64              `json:"seq_id"`
		Kind       string             `json:"kind"`
		Step       int64              `json:"step"`
		Metrics    map[string]float64 `json:"metrics"`
		DurationMS float64            `json:"duration_ms"`
	} `json:"items"`
	Summary map[string]struct {
		Last  float64 `json:"last"`
		Min   float64 `json:"min"`
		Max   float64 `json:"max"`
		Mean  float64 `json:"mean"`
		Count int64   `json:"count"`
	} `json:"summary"`
	NextAfterSeq int64 `json:"next_after_seq"`
}

// Cost is a session's cost: TotalMicroUSD is a number once every
// component settled, else the string "cost_pending".
type Cost struct {
	SessionID            string          `json:"session_id"`
	EstimatedMaxMicroUSD int64           `json:"estimated_max_microusd"`
	SettlementStatus     string          `json:"settlement_status"`
	TotalMicroUSD        json.RawMessage `json:"total_microusd"`
	Components           json.RawMessage `json:"components"`
}
