package actors

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

// scope is where a kind may be submitted.
type scope uint8

const (
	onRun     scope = 1 << iota // POST /v1/training/runs/{id}/operations
	onSampler                   // POST /v1/training/samplers/{id}/operations
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
type trainEntry func(e *executor, ctx context.Context, ts *trainerState, j *job, opID string, p payload.Parsed) (*applied, error)

// sampleEntry starts an operation on the sampling executor, the sampler's
// adapter held.
type sampleEntry func(e *samplingExecutor, j *samplingJob, h *heldAdapter, p payload.Parsed, start time.Time)

// opKind is one row of the table.
type opKind struct {
	name  string
	scope scope
	// parse decodes and schema-checks the payload; nil for finish and
	// cancel, which have their own endpoints and no payload.
	parse func(raw []byte) (payload.Parsed, error)
	// mutates: it changes the trainer, so its failure poisons the run and
	// its success is replayed when the trainer is rebuilt.
	mutates  bool
	meter    string // the providers meter its tokens are billed on ("" none)
	snapshot snapshotPolicy
	// train runs it on the trainer executor; nil: the run's grain completes
	// it itself (finish, cancel) or it never runs on a run.
	train trainEntry
	// sample runs it on the sampling executor; nil: never on a sampler.
	sample sampleEntry
}

// kindTable lists every kind, in the order the API documents them.
var kindTable []opKind

// kindIndex is kindTable by name.
var kindIndex map[string]*opKind

// The table is filled at init: its entries are executor methods, which
// read the table themselves (a package-level initializer would be a cycle).
func init() {
	kindTable = []opKind{
		{name: payload.Forward, scope: onRun, parse: payload.ParseBatch, meter: providers.MeterForwardTokens,
			train: (*executor).forward},
		{name: payload.ForwardBackward, scope: onRun, parse: payload.ParseBatch, mutates: true, meter: providers.MeterTrainTokens,
			train: (*executor).forwardBackward},
		{name: payload.Sample, scope: onRun | onSampler, parse: payload.ParseSample, meter: providers.MeterSampleTokens,
			train: (*executor).sampleForRun, sample: (*samplingExecutor).fly},
		{name: payload.OptimStep, scope: onRun, parse: payload.ParseStep, mutates: true, snapshot: snapshotPeriodic,
			train: (*executor).optimStep},
		{name: payload.SaveState, scope: onRun, parse: payload.ParseSave, train: (*executor).saveState},
		{name: payload.LoadState, scope: onRun, parse: payload.ParseLoad, mutates: true, snapshot: snapshotAlways,
			train: (*executor).loadState},
		{name: payload.SaveWeightsForSampler, scope: onRun, parse: payload.ParseSaveWeights, train: (*executor).saveWeightsOp},
		{name: payload.ExportLoRA, scope: onRun, parse: payload.ParseExport, train: (*executor).exportLoRA},
		{name: payload.Logprobs, scope: onSampler, parse: payload.ParseLogprobs, meter: providers.MeterSampleTokens,
			sample: (*samplingExecutor).logprobs},
		{name: payload.Finish},
		{name: payload.Cancel},
	}
	kindIndex = make(map[string]*opKind, len(kindTable))
	for i := range kindTable {
		kindIndex[kindTable[i].name] = &kindTable[i]
	}
}

// kindOf is kind's row; an unknown kind has the zero row (no parser, no
// entries, not submittable anywhere).
func kindOf(kind string) *opKind {
	if k := kindIndex[kind]; k != nil {
		return k
	}
	return &opKind{name: kind}
}

// parse decodes and checks a payload of kind.
func parse(kind string, raw []byte) (payload.Parsed, error) {
	k := kindOf(kind)
	if k.parse == nil {
		return nil, &payload.Invalid{Field: "kind", Reason: "\"" + kind + "\" is not an operation this service runs"}
	}
	return k.parse(raw)
}

// RunKinds are the kinds a run takes, in the API's order.
func RunKinds() []string { return kindsIn(onRun) }

// SamplerKinds are the kinds a sampler takes, in the API's order.
func SamplerKinds() []string { return kindsIn(onSampler) }

func kindsIn(s scope) []string {
	var out []string
	for _, k := range kindTable {
		if k.scope&s != 0 {
			out = append(out, k.name)
		}
	}
	return out
}
