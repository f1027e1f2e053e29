package train

import (
	"context"
	"errors"

	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/optim"
	"github.com/wts-project/wts/kernels/transformer"
)

// Engine is a base model on one device as training drives it: each run's
// learner (its adapter, accumulated gradient and AdamW moments) lives on
// that device, a batch runs a micro-batch at a time, and only data,
// losses, logprobs and metrics cross. OnCPU is the CPU engine's; a trainer
// executor runs the engine of the device it owns (docs/engine.md).
type Engine interface {
	// Config is the base model's.
	Config() model.Config
	// NewLearner starts training ad, its optimizer state fresh.
	NewLearner(ad *lora.Adapter[float32]) Learner
	// LoadLearner restores a learner that SaveState wrote into dir.
	LoadLearner(dir string) (Learner, error)
	// NextShared runs the next micro-batch of each of bs (begun by this
	// engine's learners, each sharing with the first: Batch.Shares) in one
	// pass, each giving what its own Next gives.
	NextShared(ctxs []context.Context, bs []Batch) error
}

// Learner is one run's training state on its engine. A run applies its
// primitives one at a time, in order.
type Learner interface {
	// Adapter is the live adapter, on the host: a sampler's copy is cloned
	// from it, a checkpoint or export written from it.
	Adapter() *lora.Adapter[float32]
	// Steps is the number of optimizer steps taken.
	Steps() int
	// PendingGradients is the number of forward_backward batches added to
	// the gradient since the last step.
	PendingGradients() int
	// Forward and ForwardBackward run a whole batch (Begin, then Next to
	// the end).
	Forward(ctx context.Context, data []Datum, lossName string, config map[string]float64) (*Output, error)
	ForwardBackward(ctx context.Context, data []Datum, lossName string, config map[string]float64) (*Output, error)
	// Begin checks a batch and starts it; nothing is computed yet.
	Begin(data []Datum, lossName string, config map[string]float64, backward bool) (Batch, error)
	// OptimStep applies AdamW with the accumulated gradient and clears it;
	// on an error nothing changes.
	OptimStep(p optim.Params) (optim.Metrics, error)
	// SaveState writes the adapter and the optimizer state to dir.
	SaveState(dir, baseModel string) error
}

// Batch is a forward or forward_backward in progress (Pass on the CPU).
type Batch interface {
	// Done reports whether every micro-batch has run.
	Done() bool
	// Next runs the next micro-batch; a cancelled ctx stops it first.
	Next(ctx context.Context) error
	// NextTokens is the number of tokens Next would run.
	NextTokens() int
	// Shares reports whether q's next micro-batch can run in one pass with
	// this one's (Engine.NextShared).
	Shares(q Batch) bool
	// Output ends a done batch: its losses and logprobs, and for a
	// forward_backward its gradient added to the accumulator.
	Output() (*Output, error)
}

// errForeign is a batch handed to an engine that did not begin it.
var errForeign = errors.New("train: a batch of another engine")

// OnCPU is m as an Engine: the CPU engine. Its learners share one arena
// (Trainer.UseArena), so they must run on one goroutine at a time, as a
// trainer executor runs them.
func OnCPU(m *transformer.Model[float32]) Engine {
	return &cpuEngine{m: m, arena: transformer.NewArena[float32]()}
}

type cpuEngine struct {
	m     *transformer.Model[float32]
	arena *transformer.Arena[float32]
}

// cpuLearner is a Trainer as a Learner, and cpuBatch a Pass as a Batch.
type cpuLearner struct{ *Trainer }

type cpuBatch struct{ *Pass }

func (e *cpuEngine) Config() model.Config { return e.m.Cfg() }

func (e *cpuEngine) NewLearner(ad *lora.Adapter[float32]) Learner {
	t := NewTrainer(e.m, ad)
	t.UseArena(e.arena)
	return cpuLearner{t}
}

func (e *cpuEngine) LoadLearner(dir string) (Learner, error) {
	t, err := LoadState(dir, e.m)
	if err != nil {
		return nil, err
	}
	t.UseArena(e.arena)
	return cpuLearner{t}, nil
}

func (e *cpuEngine) NextShared(ctxs []context.Context, bs []Batch) error {
	ps := make([]*Pass, len(bs))
	for i, b := range bs {
		cb, ok := b.(cpuBatch)
		if !ok || cb.t.model != e.m {
			return errForeign
		}
		ps[i] = cb.Pass
	}
	return NextShared(ctxs, ps)
}

func (l cpuLearner) Begin(data []Datum, lossName string, config map[string]float64, backward bool) (Batch, error) {
	p, err := l.Trainer.Begin(data, lossName, config, backward)
	if err != nil {
		return nil, err
	}
	return cpuBatch{p}, nil
}

func (b cpuBatch) Shares(q Batch) bool {
	cq, ok := q.(cpuBatch)
	return ok && b.Pass.Shares(cq.Pass)
}
