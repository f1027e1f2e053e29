package executor

import (
	"encoding/json"
	"math"
	"time"

	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/persistence"
)

// done is the executor's report on one operation.
type Done struct {
	Epoch       uint64
	SeqID       int64
	Status      string // succeeded, failed or cancelled
	Code        string
	Message     string
	Result      json.RawMessage
	Metrics     map[string]float64 // the step record's values, for fwd-bwd and optim_step
	Tokens      int64              // token positions the model processed
	Steps       int64
	DurationMS  float64
	SnapshotSeq int64 // a snapshot was taken after this operation

	Checkpoint *persistence.Checkpoint // what save_state wrote
	Artifact   *persistence.Artifact   // what export_lora wrote

	WeightVersion int64 // a weight version saved for the sampler
	Handoff       bool  // a run-scoped sample goes on in the sampler
}

// Progress is the executor's progress report on the executing
// operation.
type Progress struct {
	Epoch    uint64
	SeqID    int64
	Progress json.RawMessage
}

// opProgress is an executing operation's progress as its record shows it:
// tokens done of the most it may take, at what rate, and for a sample its
// sequences done of those asked for.
type opProgress struct {
	TokensDone     int     `json:"tokens_done"`
	TokensTotal    int     `json:"tokens_total"`
	TokensPerS     float64 `json:"tokens_per_s"`
	SequencesDone  *int    `json:"sequences_done,omitempty"`
	SequencesTotal *int    `json:"sequences_total,omitempty"`
}

// encode is p with its rate since the work started.
func (p opProgress) encode(since time.Time) json.RawMessage {
	if s := time.Since(since).Seconds(); s > 0 {
		p.TokensPerS = math.Round(float64(p.TokensDone)/s*10) / 10
	}
	raw, _ := json.Marshal(p)
	return raw
}

// loraConfig is the engine configuration of a run's adapter.
func LoRAConfig(l *persistence.LoRA) lora.Config {
	c := lora.Config{Rank: l.Rank, Alpha: lora.DefaultAlpha, Seed: l.Seed}
	c.Targets(l.TrainAttn, l.TrainMLP, l.TrainUnembed)
	return c
}
