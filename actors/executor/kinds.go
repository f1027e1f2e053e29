package executor

import (
	"context"
	"time"

	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/providers"
)

// The operation kinds, as one table: what each one's payload is, where it
// may be submitted, whether it changes the trainer, what it is metered on,
// when the trainer is snapshotted after it, and which executor entry runs
// it. Everything that depends on a kind reads its row here; adding a kind
// is one row (with its payload parser and its engine entry).

// Scope is where a kind may be submitted.
type Scope uint8

const (
	OnRun     Scope = 1 << iota // POST /v1/training/runs/{id}/operations
	OnSampler                   // POST /v1/training/samplers/{id}/operations
)

// snapshotPolicy is when the executor snapshots the run's trainer after an
// operation of a kind succeeded.
type snapshotPolicy uint8

const (
	snapshotNever    snapshotPolicy = iota
	snapshotPeriodic                // when Config.SnapshotEvery of compute has passed since the last one
	snapshotAlways                  // a rebuild must never need what it read (load_state's checkpoint files go with their run)
)

// trainEntry runs an operation on its run's trainer (and on replay).
type trainEntry func(e *Trainer, ctx context.Context, ts *trainerState, j *Job, opID string, p payload.Parsed) (*applied, error)

// sampleEntry starts an operation on the sampling executor, the sampler's
// adapter held.
type sampleEntry func(e *Sampling, j *SamplingJob, h *heldAdapter, p payload.Parsed, start time.Time)

// Kind is one row of the table.
type Kind struct {
	Name  string
	Scope Scope
	// Parse decodes and schema-checks the payload; nil for finish and
	// cancel, which have their own endpoints and no payload.
	Parse func(raw []byte) (payload.Parsed, error)
	// Mutates: it changes the trainer, so its failure poisons the run and
	// its success is replayed when the trainer is rebuilt.
	Mutates  bool
	Meter    string // the providers meter its tokens are billed on ("" none)
	Snapshot snapshotPolicy
	// train runs it on the trainer executor; nil: the run's grain completes
	// it itself (finish, cancel) or it never runs on a run.
	train trainEntry
	// sample runs it on the sampling executor; nil: never on a sampler.
	sample sampleEntry
}

// kindTable lists every kind, in the order the API documents them.
var kindTable []Kind

// kindIndex is kindTable by name.
var kindIndex map[string]*Kind

// The table is filled at init: its entries are executor methods, which
// read the table themselves (a package-level initializer would be a cycle).
func init() {
	kindTable = []Kind{
		{Name: payload.Forward, Scope: OnRun, Parse: payload.ParseBatch, Meter: providers.MeterForwardTokens,
			train: (*Trainer).forward},
		{Name: payload.ForwardBackward, Scope: OnRun, Parse: payload.ParseBatch, Mutates: true, Meter: providers.MeterTrainTokens,
			train: (*Trainer).forwardBackward},
		{Name: payload.Sample, Scope: OnRun | OnSampler, Parse: payload.ParseSample, Meter: providers.MeterSampleTokens,
			train: (*Trainer).sampleForRun, sample: (*Sampling).fly},
		{Name: payload.OptimStep, Scope: OnRun, Parse: payload.ParseStep, Mutates: true, Snapshot: snapshotPeriodic,
			train: (*Trainer).optimStep},
		{Name: payload.SaveState, Scope: OnRun, Parse: payload.ParseSave, train: (*Trainer).saveState},
		{Name: payload.LoadState, Scope: OnRun, Parse: payload.ParseLoad, Mutates: true, Snapshot: snapshotAlways,
			train: (*Trainer).loadState},
		{Name: payload.SaveWeightsForSampler, Scope: OnRun, Parse: payload.ParseSaveWeights, train: (*Trainer).saveWeightsOp},
		{Name: payload.ExportLoRA, Scope: OnRun, Parse: payload.ParseExport, train: (*Trainer).exportLoRA},
		{Name: payload.Logprobs, Scope: OnSampler, Parse: payload.ParseLogprobs, Meter: providers.MeterSampleTokens,
			sample: (*Sampling).logprobs},
		{Name: payload.Finish},
		{Name: payload.Cancel},
	}
	kindIndex = make(map[string]*Kind, len(kindTable))
	for i := range kindTable {
		kindIndex[kindTable[i].Name] = &kindTable[i]
	}
}

// KindOf is kind's row; an unknown kind has the zero row (no parser, no
// entries, not submittable anywhere).
func KindOf(kind string) *Kind {
	if k := kindIndex[kind]; k != nil {
		return k
	}
	return &Kind{Name: kind}
}

// Parse decodes and checks a payload of kind.
func Parse(kind string, raw []byte) (payload.Parsed, error) {
	k := KindOf(kind)
	if k.Parse == nil {
		return nil, &payload.Invalid{Field: "kind", Reason: "\"" + kind + "\" is not an operation this service runs"}
	}
	return k.Parse(raw)
}

// RunKinds are the kinds a run takes, in the API's order.
func RunKinds() []string { return kindsIn(OnRun) }

// SamplerKinds are the kinds a sampler takes, in the API's order.
func SamplerKinds() []string { return kindsIn(OnSampler) }

func kindsIn(s Scope) []string {
	var out []string
	for _, k := range kindTable {
		if k.Scope&s != 0 {
			out = append(out, k.Name)
		}
	}
	return out
}
