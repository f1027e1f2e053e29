package actors

import (
	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/persistence"
)

// The typed clients of the grains and the executors: each message is one
// method here, named once, and whether its receiver is on this node (a Go
// value) or another (msgpack in a wire.Call) is the router's business. The
// grains' handler tables use the same names.

// Messages of run grains.
const (
	runSubmit       = "run.submit"
	runFinish       = "run.finish"
	runCancel       = "run.cancel"
	runEndMsg       = "run.end"
	runRetire       = "run.retire"
	runWake         = "run.wake"
	runBusy         = "run.busy"
	runExecStarted  = "run.exec_started"
	runExecDone     = "run.exec_done"
	runExecProgress = "run.exec_progress"
	runSnapshotted  = "run.snapshotted"
)

// Messages of session grains.
const (
	sessionCreateRun = "session.create_run"
	sessionHeartbeat = "session.heartbeat"
	sessionClose     = "session.close"
	sessionRunEnded  = "session.run_ended"
)

// Messages of sampler grains.
const (
	samplerSubmit       = "sampler.submit"
	samplerCancelOp     = "sampler.cancel_op"
	samplerWeights      = "sampler.weights"
	samplerRunEnded     = "sampler.run_ended"
	samplerSampleForRun = "sampler.sample_for_run"
	samplerRetire       = "sampler.retire"
	samplerWake         = "sampler.wake"
	samplerExecStarted  = "sampler.exec_started"
	samplerExecDone     = "sampler.exec_done"
	samplerSynced       = "sampler.synced"
)

// remindMsg is every kind's reminder ("session.remind", ...).
const remindMsg = ".remind"

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

// runRef is the client of a run grain.
type runRef struct{ ref }

func (s *System) run(id string) runRef { return runRef{ref{s.router, runKind, id}} }

func (c runRef) submit(sub Submission) (*Accepted, error) {
	return ask[Accepted](c.ref, runSubmit, sub)
}
func (c runRef) finish(ctl Control) (*Accepted, error) { return ask[Accepted](c.ref, runFinish, ctl) }
func (c runRef) cancel(ctl Control) (*Accepted, error) { return ask[Accepted](c.ref, runCancel, ctl) }
func (c runRef) retire(ctl Control) (*RetireReply, error) {
	return ask[RetireReply](c.ref, runRetire, ctl)
}

// end is the session ending its run.
func (c runRef) end(e runEnd) error { return c.call(runEndMsg, e) }

// wake activates the run, which recovers and resumes its queue.
func (c runRef) wake() error { return c.call(runWake, struct{}{}) }

// busy says whether the run has work queued or executing.
func (c runRef) busy() (bool, error) {
	busy, err := ask[bool](c.ref, runBusy, struct{}{})
	return *busy, err
}

// The executors' reports to the run (counted until handled; see
// grain.Router.Report) and their notes (plain tells).
func (c runRef) execStarted(st executor.Started)     { c.report(runExecStarted, st) }
func (c runRef) execDone(d *executor.Done)           { c.report(runExecDone, d) }
func (c runRef) execProgress(p executor.Progress)    { c.tell(runExecProgress, p) }
func (c runRef) snapshotted(sn executor.Snapshotted) { c.tell(runSnapshotted, sn) }

// sessionRef is the client of a session grain.
type sessionRef struct{ ref }

func (s *System) session(id string) sessionRef { return sessionRef{ref{s.router, sessionKind, id}} }

func (c sessionRef) createRun(req NewRun) (*RunReply, error) {
	return ask[RunReply](c.ref, sessionCreateRun, req)
}
func (c sessionRef) heartbeat(t persistence.Tenant) (*Session, error) {
	return ask[Session](c.ref, sessionHeartbeat, t)
}
func (c sessionRef) close(t persistence.Tenant) (*Session, error) {
	return ask[Session](c.ref, sessionClose, t)
}

// runEnded tells the session its run ended (a notice: it may be passivating).
func (c sessionRef) runEnded() { c.notify(sessionRunEnded, struct{}{}) }

// samplerRef is the client of a sampler grain.
type samplerRef struct{ ref }

func (s *System) sampler(id string) samplerRef { return samplerRef{ref{s.router, samplerKind, id}} }

func (c samplerRef) submit(sub Submission) (*Accepted, error) {
	return ask[Accepted](c.ref, samplerSubmit, sub)
}
func (c samplerRef) cancelOp(seq int64) (*persistence.Operation, error) {
	return ask[persistence.Operation](c.ref, samplerCancelOp, seq)
}
func (c samplerRef) retire() error { return c.call(samplerRetire, struct{}{}) }
func (c samplerRef) wake() error   { return c.call(samplerWake, struct{}{}) }

// The run's notices to its sampler, which may be passivating.
func (c samplerRef) weights(u weightsUpdate)   { c.notify(samplerWeights, u) }
func (c samplerRef) runEnded(u weightsUpdate)  { c.notify(samplerRunEnded, u) }
func (c samplerRef) sampleForRun(rs runSample) { c.notify(samplerSampleForRun, rs) }

// The sampling executor's reports to the sampler.
func (c samplerRef) execStarted(st executor.Started) { c.report(samplerExecStarted, st) }
func (c samplerRef) execDone(d *executor.Done)       { c.report(samplerExecDone, d) }
func (c samplerRef) synced(s executor.Synced)        { c.report(samplerSynced, s) }

// The executors' commands.
func (s *System) execJob(j *executor.Job)        { s.router.Send(s.executor, executor.MsgJob, j) }
func (s *System) execCancel(r executor.JobRef)   { s.router.Send(s.executor, executor.MsgCancel, r) }
func (s *System) execRelease(r executor.JobRef)  { s.router.Send(s.executor, executor.MsgRelease, r) }
func (s *System) sample(j *executor.SamplingJob) { s.router.Send(s.sampling, executor.MsgSample, j) }
func (s *System) samplingCancel(r executor.SamplingRef) {
	s.router.Send(s.sampling, executor.MsgSamplingCancel, r)
}

// samplingRelease drops a sampler's adapter from the sampling executor.
func (s *System) samplingRelease(samplerID string) {
	s.router.Send(s.sampling, executor.MsgSamplingRelease, executor.JobRef{RunID: samplerID})
}

// reports carries the executors' reports to the grains whose jobs they are.
type reports struct{ s *System }

func (r reports) RunStarted(id string, st executor.Started)         { r.s.run(id).execStarted(st) }
func (r reports) RunDone(id string, d *executor.Done)               { r.s.run(id).execDone(d) }
func (r reports) RunProgress(id string, p executor.Progress)        { r.s.run(id).execProgress(p) }
func (r reports) RunSnapshotted(id string, sn executor.Snapshotted) { r.s.run(id).snapshotted(sn) }
func (r reports) SamplerStarted(id string, st executor.Started)     { r.s.sampler(id).execStarted(st) }
func (r reports) SamplerDone(id string, d *executor.Done)           { r.s.sampler(id).execDone(d) }
func (r reports) SamplerSynced(id string, sy executor.Synced)       { r.s.sampler(id).synced(sy) }
