package actors

import (
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

// Messages of the executors.
const (
	execJob         = "exec.job"
	execCancel      = "exec.cancel"
	execRelease     = "exec.release"
	execTrim        = "exec.trim"
	samplingJobMsg  = "samp.job"
	samplingCancel  = "samp.cancel"
	samplingRelease = "samp.release"
	samplingTrim    = "samp.trim"
)

// runRef is the client of run grain id.
type runRef struct {
	r  *grain.Router
	id string
}

func (s *System) run(id string) runRef { return runRef{s.router, id} }

func (c runRef) submit(sub Submission) (*Accepted, error) {
	var out Accepted
	return &out, c.r.Call(runKind, c.id, runSubmit, sub, &out)
}

func (c runRef) finish(ctl Control) (*Accepted, error) {
	var out Accepted
	return &out, c.r.Call(runKind, c.id, runFinish, ctl, &out)
}

func (c runRef) cancel(ctl Control) (*Accepted, error) {
	var out Accepted
	return &out, c.r.Call(runKind, c.id, runCancel, ctl, &out)
}

func (c runRef) retire(ctl Control) (*RetireReply, error) {
	var out RetireReply
	return &out, c.r.Call(runKind, c.id, runRetire, ctl, &out)
}

// end is the session ending its run.
func (c runRef) end(e runEnd) error { return c.r.Call(runKind, c.id, runEndMsg, e, nil) }

// wake activates the run, which recovers and resumes its queue.
func (c runRef) wake() error { return c.r.Call(runKind, c.id, runWake, struct{}{}, nil) }

// busy says whether the run has work queued or executing.
func (c runRef) busy() (bool, error) {
	var busy bool
	return busy, c.r.Call(runKind, c.id, runBusy, struct{}{}, &busy)
}

// The executors' reports to the run (counted until handled; see
// grain.Router.Report) and their notes (plain tells).
func (c runRef) execStarted(st started)        { c.r.Report(runKind, c.id, runExecStarted, st) }
func (c runRef) execDone(d *done)              { c.r.Report(runKind, c.id, runExecDone, d) }
func (c runRef) execProgress(p progressUpdate) { c.r.Tell(runKind, c.id, runExecProgress, p) }
func (c runRef) snapshotted(sn snapshotted)    { c.r.Tell(runKind, c.id, runSnapshotted, sn) }

// sessionRef is the client of session grain id.
type sessionRef struct {
	r  *grain.Router
	id string
}

func (s *System) session(id string) sessionRef { return sessionRef{s.router, id} }

func (c sessionRef) createRun(req NewRun) (*RunReply, error) {
	var out RunReply
	return &out, c.r.Call(sessionKind, c.id, sessionCreateRun, req, &out)
}

func (c sessionRef) heartbeat(t persistence.Tenant) (*Session, error) {
	var out Session
	return &out, c.r.Call(sessionKind, c.id, sessionHeartbeat, t, &out)
}

func (c sessionRef) close(t persistence.Tenant) (*Session, error) {
	var out Session
	return &out, c.r.Call(sessionKind, c.id, sessionClose, t, &out)
}

// runEnded tells the session its run ended (a notice: it may be passivating).
func (c sessionRef) runEnded() { c.r.Notify(sessionKind, c.id, sessionRunEnded, struct{}{}) }

// samplerRef is the client of sampler grain id.
type samplerRef struct {
	r  *grain.Router
	id string
}

func (s *System) sampler(id string) samplerRef { return samplerRef{s.router, id} }

func (c samplerRef) submit(sub Submission) (*Accepted, error) {
	var out Accepted
	return &out, c.r.Call(samplerKind, c.id, samplerSubmit, sub, &out)
}

func (c samplerRef) cancelOp(seq int64) (*persistence.Operation, error) {
	var out persistence.Operation
	return &out, c.r.Call(samplerKind, c.id, samplerCancelOp, seq, &out)
}

func (c samplerRef) retire() error {
	return c.r.Call(samplerKind, c.id, samplerRetire, struct{}{}, nil)
}

func (c samplerRef) wake() error { return c.r.Call(samplerKind, c.id, samplerWake, struct{}{}, nil) }

// The run's notices to its sampler, which may be passivating.
func (c samplerRef) weights(u weightsUpdate)  { c.r.Notify(samplerKind, c.id, samplerWeights, u) }
func (c samplerRef) runEnded(u weightsUpdate) { c.r.Notify(samplerKind, c.id, samplerRunEnded, u) }
func (c samplerRef) sampleForRun(rs runSample) {
	c.r.Notify(samplerKind, c.id, samplerSampleForRun, rs)
}

// The sampling executor's reports to the sampler.
func (c samplerRef) execStarted(st started) { c.r.Report(samplerKind, c.id, samplerExecStarted, st) }
func (c samplerRef) execDone(d *done)       { c.r.Report(samplerKind, c.id, samplerExecDone, d) }
func (c samplerRef) synced(s synced)        { c.r.Report(samplerKind, c.id, samplerSynced, s) }

// The trainer's executor's commands.
func (s *System) execJob(j *job)        { s.router.Send(s.executor, execJob, j) }
func (s *System) execCancel(r jobRef)   { s.router.Send(s.executor, execCancel, r) }
func (s *System) execRelease(r jobRef)  { s.router.Send(s.executor, execRelease, r) }
func (s *System) execTrim()             { s.router.Send(s.executor, execTrim, struct{}{}) }
func (s *System) sample(j *samplingJob) { s.router.Send(s.sampling, samplingJobMsg, j) }

// samplingCancel stops a sampling job at its next step.
func (s *System) samplingCancel(ref samplingRef) { s.router.Send(s.sampling, samplingCancel, ref) }

// samplingRelease drops a sampler's adapter from the sampling executor.
func (s *System) samplingRelease(samplerID string) {
	s.router.Send(s.sampling, samplingRelease, jobRef{RunID: samplerID})
}

// samplingTrim asks the sampling executor to let go of idle adapters.
func (s *System) samplingTrim() { s.router.Send(s.sampling, samplingTrim, struct{}{}) }
