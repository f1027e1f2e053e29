// Package executor holds a device's executors: the trainer's (training
// operations of every run on the node, in turns by organization, and
// chores such as merged-weights builds) and the sampling executor (every
// sampler's requests decoded together), the node's memory budget they
// share, the models they load, and the operation-kind table whose entries
// they run. Grains hand them jobs carrying the grain's activation epoch and
// hear back through Reports; they refuse an epoch older than one they have
// seen.
package executor

import (
	"log/slog"
	"time"

	"github.com/wts-project/wts/actors/telemetry"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
)

// Env is what a node gives its executors.
type Env struct {
	Store   persistence.Store
	Volume  persistence.Volume
	Catalog *providers.Catalog
	Log     *slog.Logger
	Metrics *telemetry.Metrics
	// SnapshotEvery is the least compute time between two snapshots of a
	// run's trainer (taken after an optim_step).
	SnapshotEvery time.Duration
	// Reports takes the executors' word on the jobs the grains gave them.
	Reports Reports
	// Checkpoint reads a checkpoint record (load_state and export_lora name
	// one).
	Checkpoint func(id string) (*persistence.Checkpoint, error)
}

// Reports is how the executors tell grains about their work: the run or the
// sampler whose job it is.
type Reports interface {
	RunStarted(runID string, s Started)
	RunDone(runID string, d *Done)
	RunProgress(runID string, p Progress)
	RunSnapshotted(runID string, s Snapshotted)
	SamplerStarted(samplerID string, s Started)
	SamplerDone(samplerID string, d *Done)
	SamplerProgress(samplerID string, p Progress)
	SamplerSynced(samplerID string, s Synced)
}

// The executors' commands, as the grains send them.
const (
	MsgJob             = "exec.job"
	MsgCancel          = "exec.cancel"
	MsgRelease         = "exec.release"
	MsgSample          = "samp.job"
	MsgSamplingCancel  = "samp.cancel"
	MsgSamplingRelease = "samp.release"
)

// CodeCancelled ends an operation cancelled before or while it ran.
const CodeCancelled = "cancelled"

// node is what a device's two executors share.
type node struct {
	env      Env
	mem      *Budget
	models   models
	trainer  *Trainer
	sampling *Sampling
}

// Start starts a device's executors over a memory budget of budget bytes
// (0: none).
func Start(env Env, budget int64) (*Trainer, *Sampling, *Budget) {
	n := &node{env: env, mem: newBudget(budget)}
	n.trainer = newTrainer(n)
	n.sampling = newSampling(n)
	return n.trainer, n.sampling, n.mem
}

// samplingTrim asks the sampling executor to let go of its idle adapters
// (the trainer's executor needs memory), and execTrim the trainer's
// executor to evict its idle trainers (the samplers do).
func (n *node) samplingTrim() { n.sampling.cmds.put(samplingCmd{trim: true}) }

func (n *node) execTrim() {
	n.trainer.mu.Lock()
	n.trainer.trim = true
	n.trainer.mu.Unlock()
	n.trainer.wake.Signal()
}
