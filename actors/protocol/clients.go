package protocol

import (
	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/persistence"
)

// The typed clients of the grains and the executors: each message is one
// method here, named once, and whether its receiver is on this node (a Go
// value) or another (msgpack in a wire.Call) is the router's business. The
// grains' handler tables use the same names.

// Grain kinds.
const (
	SessionKind = "session"
	RunKind     = "run"
	SamplerKind = "sampler"
)

// Messages of run grains.
const (
	RunSubmit       = "run.submit"
	RunFinish       = "run.finish"
	RunCancel       = "run.cancel"
	RunEndMsg       = "run.end"
	RunRetire       = "run.retire"
	RunWake         = "run.wake"
	RunBusy         = "run.busy"
	RunExecStarted  = "run.exec_started"
	RunExecDone     = "run.exec_done"
	RunExecProgress = "run.exec_progress"
	RunSnapshotted  = "run.snapshotted"
)

// Messages of session grains.
const (
	SessionCreateRun = "session.create_run"
	SessionHeartbeat = "session.heartbeat"
	SessionClose     = "session.close"
	SessionRunEnded  = "session.run_ended"
	SessionRemind    = SessionKind + remindMsg
)

// Messages of sampler grains.
const (
	SamplerSubmit       = "sampler.submit"
	SamplerCancelOp     = "sampler.cancel_op"
	SamplerWeights      = "sampler.weights"
	SamplerRunEnded     = "sampler.run_ended"
	SamplerSampleForRun = "sampler.sample_for_run"
	SamplerRetire       = "sampler.retire"
	SamplerWake         = "sampler.wake"
	SamplerExecStarted  = "sampler.exec_started"
	SamplerExecDone     = "sampler.exec_done"
	SamplerExecProgress = "sampler.exec_progress"
	SamplerSynced       = "sampler.synced"
	SamplerRemind       = SamplerKind + remindMsg
)

// remindMsg is every kind's reminder ("session.remind", ...); a reminder's
// key is "kind/id" (ReminderKey).
const remindMsg = ".remind"

// ReminderKey is the key of grain kind/id's reminder.
func ReminderKey(kind, id string) string { return kind + "/" + id }

// Remind delivers the reminder of grain kind/id, activating the grain if
// it is not in memory.
func (n *Node) Remind(kind, id string) error {
	return n.Router.Call(kind, id, kind+remindMsg, struct{}{}, nil)
}

// ref is a typed client's grain: its kind and id, and the router that
// reaches it.
type ref struct {
	r        *grain.Router
	kind, id string
}

func (c ref) call(method string, req any) error { return c.r.Call(c.kind, c.id, method, req, nil) }
func (c ref) report(method string, v any)       { c.r.Report(c.kind, c.id, method, v) }
func (c ref) tell(method string, v any)         { c.r.Tell(c.kind, c.id, method, v) }
func (c ref) notify(method string, v any)       { c.r.Notify(c.kind, c.id, method, v) }

// ask is a call whose reply is a T.
func ask[T any](c ref, method string, req any) (*T, error) {
	return grain.Ask[T](c.r, c.kind, c.id, method, req)
}

// RunRef is the client of a run grain.
type RunRef struct{ ref }

// Run is run id's client.
func (n *Node) Run(id string) RunRef { return RunRef{ref{n.Router, RunKind, id}} }

func (c RunRef) Submit(sub Submission) (*Accepted, error) {
	return ask[Accepted](c.ref, RunSubmit, sub)
}
func (c RunRef) Finish(ctl Control) (*Accepted, error) { return ask[Accepted](c.ref, RunFinish, ctl) }
func (c RunRef) Cancel(ctl Control) (*Accepted, error) { return ask[Accepted](c.ref, RunCancel, ctl) }
func (c RunRef) Retire(ctl Control) (*RetireReply, error) {
	return ask[RetireReply](c.ref, RunRetire, ctl)
}

// End is the session ending its run.
func (c RunRef) End(e RunEnd) error { return c.call(RunEndMsg, e) }

// Wake activates the run, which recovers and resumes its queue.
func (c RunRef) Wake() error { return c.call(RunWake, struct{}{}) }

// Busy says whether the run has work queued or executing.
func (c RunRef) Busy() (bool, error) {
	busy, err := ask[bool](c.ref, RunBusy, struct{}{})
	return *busy, err
}

// The executors' reports to the run (counted until handled; see
// grain.Router.Report) and their notes (plain tells).
func (c RunRef) ExecStarted(st executor.Started)     { c.report(RunExecStarted, st) }
func (c RunRef) ExecDone(d *executor.Done)           { c.report(RunExecDone, d) }
func (c RunRef) ExecProgress(p executor.Progress)    { c.tell(RunExecProgress, p) }
func (c RunRef) Snapshotted(sn executor.Snapshotted) { c.tell(RunSnapshotted, sn) }

// SessionRef is the client of a session grain.
type SessionRef struct{ ref }

// Session is session id's client.
func (n *Node) Session(id string) SessionRef { return SessionRef{ref{n.Router, SessionKind, id}} }

func (c SessionRef) CreateRun(req NewRun) (*RunReply, error) {
	return ask[RunReply](c.ref, SessionCreateRun, req)
}
func (c SessionRef) Heartbeat(t persistence.Tenant) (*Session, error) {
	return ask[Session](c.ref, SessionHeartbeat, t)
}
func (c SessionRef) Close(t persistence.Tenant) (*Session, error) {
	return ask[Session](c.ref, SessionClose, t)
}

// RunEnded tells the session its run ended (a notice: it may be passivating).
func (c SessionRef) RunEnded() { c.notify(SessionRunEnded, struct{}{}) }

// SamplerRef is the client of a sampler grain.
type SamplerRef struct{ ref }

// Sampler is sampler id's client.
func (n *Node) Sampler(id string) SamplerRef { return SamplerRef{ref{n.Router, SamplerKind, id}} }

func (c SamplerRef) Submit(sub Submission) (*Accepted, error) {
	return ask[Accepted](c.ref, SamplerSubmit, sub)
}
func (c SamplerRef) CancelOp(seq int64) (*persistence.Operation, error) {
	return ask[persistence.Operation](c.ref, SamplerCancelOp, seq)
}
func (c SamplerRef) Retire() error { return c.call(SamplerRetire, struct{}{}) }
func (c SamplerRef) Wake() error   { return c.call(SamplerWake, struct{}{}) }

// The run's notices to its sampler, which may be passivating.
func (c SamplerRef) Weights(u WeightsUpdate)   { c.notify(SamplerWeights, u) }
func (c SamplerRef) RunEnded(u WeightsUpdate)  { c.notify(SamplerRunEnded, u) }
func (c SamplerRef) SampleForRun(rs RunSample) { c.notify(SamplerSampleForRun, rs) }

// The sampling executor's reports to the sampler.
func (c SamplerRef) ExecStarted(st executor.Started)  { c.report(SamplerExecStarted, st) }
func (c SamplerRef) ExecDone(d *executor.Done)        { c.report(SamplerExecDone, d) }
func (c SamplerRef) ExecProgress(p executor.Progress) { c.tell(SamplerExecProgress, p) }
func (c SamplerRef) Synced(s executor.Synced)         { c.report(SamplerSynced, s) }

// The executors' commands.
func (n *Node) ExecJob(j *executor.Job)       { n.Router.Send(n.TrainerPID, executor.MsgJob, j) }
func (n *Node) ExecCancel(r executor.JobRef)  { n.Router.Send(n.TrainerPID, executor.MsgCancel, r) }
func (n *Node) ExecRelease(r executor.JobRef) { n.Router.Send(n.TrainerPID, executor.MsgRelease, r) }
func (n *Node) Sample(j *executor.SamplingJob) {
	n.Router.Send(n.SamplingPID, executor.MsgSample, j)
}
func (n *Node) SamplingCancel(r executor.SamplingRef) {
	n.Router.Send(n.SamplingPID, executor.MsgSamplingCancel, r)
}

// SamplingRelease drops a sampler's adapter from the sampling executor.
func (n *Node) SamplingRelease(samplerID string) {
	n.Router.Send(n.SamplingPID, executor.MsgSamplingRelease, executor.JobRef{RunID: samplerID})
}

// Reports carries the executors' reports to the grains whose jobs they
// are (executor.Reports).
type Reports struct{ N *Node }

func (r Reports) RunStarted(id string, st executor.Started)         { r.N.Run(id).ExecStarted(st) }
func (r Reports) RunDone(id string, d *executor.Done)               { r.N.Run(id).ExecDone(d) }
func (r Reports) RunProgress(id string, p executor.Progress)        { r.N.Run(id).ExecProgress(p) }
func (r Reports) RunSnapshotted(id string, sn executor.Snapshotted) { r.N.Run(id).Snapshotted(sn) }
func (r Reports) SamplerStarted(id string, st executor.Started)     { r.N.Sampler(id).ExecStarted(st) }
func (r Reports) SamplerDone(id string, d *executor.Done)           { r.N.Sampler(id).ExecDone(d) }
func (r Reports) SamplerProgress(id string, p executor.Progress)    { r.N.Sampler(id).ExecProgress(p) }
func (r Reports) SamplerSynced(id string, sy executor.Synced)       { r.N.Sampler(id).Synced(sy) }
