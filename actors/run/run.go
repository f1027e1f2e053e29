// Package run is the run grain: one per run, it admits the run's
// operations in seq_id order, runs them one at a time on the trainer's
// executor, records their outcome (with their usage, outputs and metrics),
// and ends, finishes, cancels and retires the run.
package run

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/wts-project/wts/actors/artifacts"
	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/lease"
	"github.com/wts-project/wts/actors/limits"
	"github.com/wts-project/wts/actors/oplog"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/slots"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/cluster"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
)

// Grain owns one run: it accepts operations in seq_id order, runs them one
// at a time on the executor, and records their outcome. It caches the run
// record, which only it writes, fenced by the activation epoch.
type Grain struct {
	oplog.Owner
	run *persistence.Run
	// lease is the session's lease as accept last read or wrote it: every
	// accepted operation checks it, and renews it about once a second.
	lease persistence.Memo[lease.Lease]
	// parsed holds, by seq_id, the parsed payloads of
	// queued operations this activation accepted, for the jobs that start
	// them; an entry leaves when its seq_id leaves the queue.
	parsed map[int64]payload.Parsed
	// dispatched: this activation has given the executor a job (the first
	// is marked executing at once, see executor.markStarted).
	dispatched bool
	// handed is the run-scoped sample this activation handed to the run's
	// sampler, while it is executing: the sampler holds it in memory only,
	// so it is handed again when the run is woken (after members left the
	// cluster, the sampler's among them perhaps); the sampler drops a
	// sample it already holds.
	handed *protocol.RunSample
}

// New is a run grain of node n: the kind's producer.
func New(n *protocol.Node) actor.Actor {
	return &Grain{Owner: oplog.Owner{Base: grain.Base{RT: n.Runtime}, N: n}}
}

func (g *Grain) Receive(ctx actor.Context) {
	if g.Methods == nil {
		g.Methods = map[string]grain.Handler{
			protocol.RunSubmit:       g.submit,
			protocol.RunFinish:       g.finish,
			protocol.RunCancel:       g.cancel,
			protocol.RunEndMsg:       g.end,
			protocol.RunRetire:       g.retire,
			protocol.RunWake:         g.wake,
			protocol.RunBusy:         func(actor.Context, grain.In) (any, error) { return g.busy(), nil },
			protocol.RunExecStarted:  g.execStarted,
			protocol.RunSnapshotted:  g.snapshotted,
			protocol.RunExecDone:     g.execDone,
			protocol.RunExecProgress: g.execProgress,
		}
		g.Load = func() (string, int, int64) { return g.run.Tenant.Org, g.Depth(), g.Held() }
		g.Idle = func() bool { return !g.busy() }
	}
	g.Handle(ctx, g.activate, g.kick)
}

// activate takes the run's lease (bumps its epoch) and recovers from
// whatever the previous activation left. Pending operations queue again.
// One found executing was on the device when the node stopped: nothing of
// it was recorded, so it queues again first and is re-run on the trainer
// rebuilt from the run's snapshot and replay (the engine is deterministic).
// Only an operation the node died under oplog.MaxAttempts times fails, as
// interrupted, and if it changes the trainer, so does the run: the
// operations queued after it were written against a state that will never
// exist.
func (g *Grain) activate() error {
	err := g.N.Store.Update(func(tx persistence.Tx) error {
		r := new(persistence.Run)
		if ok, err := tx.Get(persistence.Runs, []byte(g.ID), r); err != nil || !ok {
			if err == nil {
				err = protocol.NotFound("run", g.ID)
			}
			return err
		}
		h, lerr := g.TakeLease(tx)
		if lerr != nil {
			return lerr
		}
		r.NextSeqID = h.NextSeqID
		wasTerminal := states.Terminal(states.RunMoves, r.Status)
		if !wasTerminal { // its session's dedicated trainer is where it lives
			if err := slots.Follow(tx, r.SessionID, g.N.Self); err != nil {
				return err
			}
		}
		g.Queue, g.parsed, g.Executing, g.dispatched = g.Queue[:0], map[int64]payload.Parsed{}, 0, false
		now := g.N.Now()
		err := persistence.ScanOps(tx, r.ID, 0, func(op *persistence.Operation) error {
			var err error
			switch {
			case op.Status == states.OpExecuting && states.Terminal(states.RunMoves, r.Status):
				err = oplog.FailInterrupted(op, now)
			case op.Status == states.OpExecuting:
				var requeued bool
				switch requeued, err = oplog.Requeue(op, now); {
				case err != nil:
				case requeued:
					g.Queue = append(g.Queue, op.SeqID)
				case executor.KindOf(op.Kind).Mutates: // it failed on its last attempt
					r.ErrorCode = protocol.CodeInterrupted
					err = states.Move(states.RunMoves, &r.Status, states.RunInterrupted)
				}
			case op.Status == states.OpPending && states.Terminal(states.RunMoves, r.Status):
				err = oplog.Settle(op, states.OpCancelled, protocol.CodeInterrupted, "the run was interrupted before this operation started", now)
			case op.Status == states.OpPending:
				g.Queue = append(g.Queue, op.SeqID)
				return nil
			default:
				return nil
			}
			if err != nil {
				return err
			}
			return g.PutOp(tx, op)
		})
		if err != nil {
			return err
		}
		r.UpdatedAt = now
		if err := tx.Put(persistence.Runs, []byte(r.ID), r); err != nil {
			return err
		}
		if states.Terminal(states.RunMoves, r.Status) && !wasTerminal {
			if err := ended(tx, r); err != nil {
				return err
			}
		}
		g.run = r
		return nil
	})
	return err
}

// ended records, inside tx, that run r has just ended: its organization's
// live count, its session's dedicated trainer (a run that ended needs it no
// more), and its placement record.
func ended(tx persistence.Tx, r *persistence.Run) error {
	if err := limits.Close(tx, r.Tenant.Org, limits.Runs); err != nil {
		return err
	}
	if err := slots.Release(tx, r.SessionID); err != nil {
		return err
	}
	return cluster.Forget(tx, protocol.RunKind, r.ID)
}

// write commits fn's changes to a copy of the run record and, once durable,
// makes the copy the grain's; if the write fails, nothing of fn's stays.
//
// The fence and next seq_id are the run's small Head record, so that the
// check reads a few bytes rather than decoding the run, and the run record
// is rewritten only when fn changed something else in it.
func (g *Grain) write(fn func(tx persistence.Tx, r *persistence.Run) error) error {
	var next *persistence.Run
	err := g.HeadTx(func(tx persistence.Tx) (int64, error) {
		r := *g.run
		if err := fn(tx, &r); err != nil {
			return 0, err
		}
		if states.Terminal(states.RunMoves, r.Status) && !states.Terminal(states.RunMoves, g.run.Status) {
			if err := ended(tx, &r); err != nil {
				return 0, err
			}
		}
		next = &r
		if r.SameRecord(g.run) {
			return r.NextSeqID, nil
		}
		r.UpdatedAt = g.N.Now()
		return r.NextSeqID, tx.Put(persistence.Runs, []byte(r.ID), &r)
	})
	if err == nil {
		g.run = next
	}
	return err
}

// busy reports whether the run has work queued or executing.
func (g *Grain) busy() bool { return g.Executing != 0 || len(g.Queue) > 0 }

// accepting refuses new operations on a run that takes none.
func accepting(r *persistence.Run) error {
	if r.Status != states.RunCreated && r.Status != states.RunRunning {
		return protocol.Refuse(protocol.CodeRunNotAccepting, "run %s is %s and accepts no operations", r.ID, r.Status)
	}
	return nil
}

func (g *Grain) submit(_ actor.Context, in grain.In) (any, error) { return g.Admit(in, g) }

// What the run gives oplog.Admit.
func (g *Grain) Tenant() persistence.Tenant { return g.run.Tenant }
func (g *Grain) NextSeq() int64             { return g.run.NextSeqID }
func (g *Grain) Takes() error               { return accepting(g.run) }

func (g *Grain) Rules() (*oplog.Rules, error) {
	return g.RulesFor(executor.OnRun, g.run.Tenant, g.run.SessionID, g.run.BaseModel, g.run)
}

// Accept writes an admitted operation, keeping its parsed payload near the
// head of the queue for its job.
func (g *Grain) Accept(sub *protocol.Submission, key []byte, p payload.Parsed, hold int64) (*persistence.Operation, error) {
	if len(g.Queue) < oplog.ParsedKeep {
		g.parsed[sub.SeqID] = p
	}
	op, err := g.acceptOp(key, sub.Kind, sub.IdempotencyKey, sub.RequestHash, sub.Payload, hold)
	if err != nil {
		delete(g.parsed, sub.SeqID)
		return nil, err
	}
	g.kick()
	return op, nil
}

// leaseWriteEvery is the least extension an accepted operation writes to
// its session's lease: a lease is minutes long, and rewriting the session
// record on every submission of a busy run would cost a write per operation
// for a few milliseconds of lease.
const leaseWriteEvery = time.Second

// acceptOp writes a new operation at the run's next seq_id, with its
// idempotency entry, and renews the session's lease (an operation is
// activity). Nothing is acknowledged before this is on disk.
func (g *Grain) acceptOp(idem []byte, kind, key, hash string, body json.RawMessage, hold int64) (*persistence.Operation, error) {
	var op *persistence.Operation
	var next advanced
	// With nothing queued or executing, the operation goes to the executor
	// as soon as it is durable (it stays pending until its work starts).
	idle := g.Executing == 0 && len(g.Queue) == 0 && kind != payload.Finish && kind != payload.Cancel
	pooled := idle && g.sharesPasses() // a job is made here only when idle
	err := g.write(func(tx persistence.Tx, r *persistence.Run) error {
		now := g.N.Now()
		if kind != payload.Cancel {
			l, ok, err := g.lease.Get(tx, persistence.Leases, []byte(r.SessionID))
			if err == nil && !ok {
				err = fmt.Errorf("session %s has no lease record", r.SessionID)
			}
			if err != nil {
				return err
			}
			// Work queued or executing keeps the lease alive (busy): a client
			// that submitted a long queue and polls does not lose it.
			if l.Revoked || !l.Live(now) && !g.busy() {
				return protocol.Refuse(protocol.CodeSessionNotReady, "session %s has ended or its lease expired (lease until %s)", r.SessionID, l.ExpiresAt.Format(time.RFC3339))
			}
			if l.Renew(now, leaseWriteEvery) {
				if err := g.lease.Put(tx, persistence.Leases, []byte(r.SessionID), l); err != nil {
					return err
				}
			}
		}
		op = &persistence.Operation{
			ID: protocol.NewID(protocol.OperationPrefix), SessionID: r.SessionID, RunID: r.ID, SeqID: r.NextSeqID,
			Kind: kind, Status: states.OpPending, CreatedAt: now, UpdatedAt: now,
			IdempotencyKey: key, RequestHash: hash, Payload: body, HoldMicroUSD: hold,
		}
		r.NextSeqID++
		var err error
		if r.Status == states.RunCreated {
			err = states.Move(states.RunMoves, &r.Status, states.RunRunning)
		}
		switch {
		case err != nil:
		case kind == payload.Finish:
			err = states.Move(states.RunMoves, &r.Status, states.RunFinishing)
		case kind == payload.Cancel:
			err = states.Move(states.RunMoves, &r.Status, states.RunCancelRequested)
		}
		if err != nil {
			return err
		}
		if err := g.PutAccepted(tx, op, idem); err != nil {
			return err
		}
		next = advanced{}
		if !idle {
			return nil
		}
		next, err = g.advance(tx, r, []int64{op.SeqID}, pooled)
		return err
	})
	if err != nil {
		return nil, err
	}
	g.N.Metrics.Accepted(kind)
	g.Queue = append(g.Queue, op.SeqID)
	if idle {
		g.started(next)
	}
	return op, nil
}

// controlKey keys a finish or cancel request's request_id: a byte after the
// run id that no idempotency key entry has (those have 0).
func controlKey(runID, kind, requestID string) []byte {
	return fmt.Appendf(nil, "%s\x01%s\x00%s", runID, kind, requestID)
}

// control accepts a finish or cancel operation while the run's status is
// one of allowed; a repeat of its request_id returns the first one.
func (g *Grain) control(req *protocol.Control, kind string, allowed ...string) (*protocol.Accepted, error) {
	if req.Tenant != g.run.Tenant {
		return nil, protocol.NotFound("run", g.ID)
	}
	key := controlKey(g.ID, kind, req.RequestID)
	if op, err := oplog.ExistingOp(g.N.Store, g.ID, key); err != nil || op != nil {
		if err != nil {
			return nil, err
		}
		return oplog.Handle(op, false), nil
	}
	if !slices.Contains(allowed, g.run.Status) {
		return nil, protocol.Refuse(protocol.CodeRunNotAccepting, "run %s is %s; %s is not possible", g.ID, g.run.Status, kind)
	}
	op, err := g.acceptOp(key, kind, "", "", nil, 0)
	if err != nil {
		return nil, err
	}
	return oplog.Handle(op, true), nil
}

func (g *Grain) finish(_ actor.Context, in grain.In) (any, error) {
	req, err := grain.Decode[protocol.Control](in)
	if err != nil {
		return nil, err
	}
	acc, err := g.control(req, payload.Finish, states.RunCreated, states.RunRunning)
	if err == nil && acc.Created {
		g.kick()
	}
	return acc, err
}

func (g *Grain) cancel(_ actor.Context, in grain.In) (any, error) {
	req, err := grain.Decode[protocol.Control](in)
	if err != nil {
		return nil, err
	}
	acc, err := g.control(req, payload.Cancel, states.RunCreated, states.RunRunning, states.RunFinishing)
	if err == nil && acc.Created {
		g.stopWork(protocol.CodeCancelled, "the run was cancelled")
	}
	return acc, err
}

// end is the session ending the run (session close or lease expiry).
func (g *Grain) end(_ actor.Context, in grain.In) (any, error) {
	req, err := grain.Decode[protocol.RunEnd](in)
	if err != nil {
		return nil, err
	}
	if states.Terminal(states.RunMoves, g.run.Status) || g.run.Status == states.RunCancelRequested {
		return struct{}{}, nil
	}
	if req.Status == states.RunCancelled {
		_, err := g.control(&protocol.Control{Tenant: g.run.Tenant, RequestID: "session-close"}, payload.Cancel, states.RunCreated, states.RunRunning, states.RunFinishing)
		if err == nil {
			g.stopWork(protocol.CodeCancelled, "the session was closed")
		}
		return struct{}{}, err
	}
	err = g.write(func(_ persistence.Tx, r *persistence.Run) error {
		r.ErrorCode = req.Code
		return states.Move(states.RunMoves, &r.Status, req.Status)
	})
	if err == nil {
		g.stopWork(req.Code, "the session's lease expired")
		g.ended()
	}
	return struct{}{}, err
}

// stopWork cancels every queued operation (a queued cancel or finish
// included) and the executing one, and completes the run's ending if
// nothing is executing.
func (g *Grain) stopWork(code, msg string) {
	var left []int64
	err := g.N.Store.Update(func(tx persistence.Tx) (err error) {
		now := g.N.Now()
		left, err = g.SweepQueue(tx, g.Queue, func(op *persistence.Operation) (bool, bool, error) {
			if op.Kind == payload.Cancel {
				return false, true, nil // the cancel itself completes the run's ending
			}
			return true, false, oplog.Settle(op, states.OpCancelled, code, msg, now)
		})
		return err
	})
	if err != nil {
		g.N.Log.Error("cancel queued operations", "run", g.ID, "err", err)
		return
	}
	for _, seq := range g.Queue {
		if !slices.Contains(left, seq) {
			delete(g.parsed, seq)
		}
	}
	g.Queue = left
	if g.Executing != 0 {
		// On the trainer, or (a run-scoped sample handed over) decoding in
		// the sampling executor: both stop it at their next step.
		g.N.ExecCancel(executor.JobRef{RunID: g.ID, SeqID: g.Executing, Epoch: g.Epoch})
		g.N.SamplingCancel(executor.SamplingRef{ForRun: true, ReplyID: g.ID, SeqID: g.Executing})
		return
	}
	g.kick()
}

// kick starts the next queued operation if none is executing. An operation
// at the head goes to the executor after a read; only a finish or cancel
// there needs a write.
func (g *Grain) kick() {
	if g.Err != nil || g.Executing != 0 || len(g.Queue) == 0 {
		return
	}
	var next advanced
	pooled := g.sharesPasses()
	err := g.N.Store.View(func(tx persistence.Tx) error {
		op, err := g.Op(tx, g.Queue[0])
		if j := g.jobFor(g.run, op, pooled); err == nil && j != nil {
			next = advanced{1, j}
		}
		return err
	})
	if err == nil && next.job != nil {
		g.started(next)
		return
	}
	err = g.write(func(tx persistence.Tx, r *persistence.Run) error {
		var err error
		next, err = g.advance(tx, r, g.Queue, pooled)
		return err
	})
	if err != nil {
		g.N.Log.Error("start operation", "run", g.ID, "seq", g.Queue[0], "err", err)
		return
	}
	g.started(next)
}

// advanced is what advance did: how many queued operations it took, and the
// job it marked executing (nil if none).
type advanced struct {
	taken int
	job   *executor.Job
}

// advance works through the head of the queue inside a write, with nothing
// executing: a finish or cancel there completes (everything before it has
// ended), and the first other operation becomes the executor's job. It
// stays pending until the executor starts it (run.exec_started): a restart
// must find executing only what was really on the device. Doing this in
// the transaction that recorded the previous operation's outcome settles a
// finish without a commit of its own. It reads the grain's queue without
// changing it (the write may still fail); started applies the outcome once
// the write is durable.
func (g *Grain) advance(tx persistence.Tx, r *persistence.Run, queue []int64, pooled bool) (advanced, error) {
	now := g.N.Now()
	for i, seq := range queue {
		op, err := g.Op(tx, seq)
		if err != nil {
			return advanced{}, err
		}
		if j := g.jobFor(r, op, pooled); j != nil {
			return advanced{i + 1, j}, nil
		}
		if err := oplog.Settle(op, states.OpSucceeded, "", "", now); err != nil {
			return advanced{}, err
		}
		if r.Status == states.RunFinishing || r.Status == states.RunCancelRequested {
			to := states.RunFinished
			if op.Kind == payload.Cancel {
				to = states.RunCancelled
			}
			if err := states.Move(states.RunMoves, &r.Status, to); err != nil {
				return advanced{}, err
			}
		}
		if err := g.PutOp(tx, op); err != nil {
			return advanced{}, err
		}
	}
	return advanced{taken: len(queue)}, nil
}

// sharesPasses reports whether the run's provider shares passes
// (providers.SharesPasses): the session's prices, read once an activation,
// and outside any transaction (a store read inside one could wait on it).
// Without them the run's passes run alone.
func (g *Grain) sharesPasses() bool {
	prices, err := g.Prices(g.run.Tenant, g.run.SessionID)
	return err == nil && providers.SharesPasses(prices.Provider)
}

// jobFor is the executor's job for op, nil for a finish or cancel (which
// the grain completes itself); pooled is sharesPasses', read before the
// transaction jobFor runs in.
func (g *Grain) jobFor(r *persistence.Run, op *persistence.Operation, pooled bool) *executor.Job {
	if op.Kind == payload.Finish || op.Kind == payload.Cancel {
		return nil
	}
	return &executor.Job{
		RunID: r.ID, Tenant: r.Tenant, Epoch: g.Epoch, OpID: op.ID, SeqID: op.SeqID, Kind: op.Kind, Payload: op.Payload, Parsed: g.parsed[op.SeqID],
		BaseModel: r.BaseModel, LoRA: r.LoRA, StateSeq: r.StateSeq, SnapshotSeq: r.SnapshotSeq,
		FromCheckpoint: r.CheckpointID != "", SamplerID: protocol.SamplerID(r.ID), WeightVersion: r.LatestWeightVersion, WeightsSeq: r.WeightsSeq,
		Pooled: pooled,
	}
}

// started applies a durable advance: the taken operations leave the queue,
// the job goes to the executor, and a run that the advance ended is
// released.
func (g *Grain) started(a advanced) {
	for _, seq := range g.Queue[:a.taken] {
		delete(g.parsed, seq)
	}
	g.Queue = g.Queue[a.taken:]
	if a.job != nil {
		a.job.First, g.dispatched = !g.dispatched, true
		g.Executing = a.job.SeqID
		g.N.ExecJob(a.job)
	}
	g.ended()
}

// ended releases a terminal run's trainer and tells its session.
func (g *Grain) ended() {
	if !states.Terminal(states.RunMoves, g.run.Status) {
		return
	}
	g.N.ExecRelease(executor.JobRef{RunID: g.ID, Epoch: g.Epoch})
	if g.run.SamplerID != "" {
		g.N.Sampler(g.run.SamplerID).RunEnded(protocol.WeightsUpdate{Version: g.run.LatestWeightVersion})
	}
	g.N.Session(g.run.SessionID).RunEnded()
}

// snapshotted records a snapshot the executor wrote when it evicted the
// run's trainer: the next rebuild starts there.
func (g *Grain) snapshotted(_ actor.Context, in grain.In) (any, error) {
	sn, err := grain.Decode[executor.Snapshotted](in)
	if err != nil || sn.Epoch != g.Epoch || sn.SnapshotSeq <= g.run.SnapshotSeq {
		return nil, err
	}
	return nil, g.write(func(_ persistence.Tx, r *persistence.Run) error {
		r.SnapshotSeq = sn.SnapshotSeq
		return nil
	})
}

// execStarted marks the operation the executor began executing.
func (g *Grain) execStarted(_ actor.Context, in grain.In) (any, error) {
	st, err := oplog.StartReport(in, g.Epoch, g.Executing)
	if st == nil {
		return nil, err
	}
	return nil, g.Fenced(func(tx persistence.Tx) error { return g.MarkExecuting(tx, st.SeqID, g.N.Now()) })
}

func (g *Grain) execDone(_ actor.Context, in grain.In) (any, error) {
	d, err := oplog.Outcome(in, g.Epoch, g.Executing)
	if d == nil {
		return nil, err
	}
	if d.Handoff {
		return nil, g.handOff(d)
	}
	if d.Status == states.OpPending {
		if g.handedNow(d.SeqID) && !g.N.Trainer.Stopping() {
			// The sampler's node is stopping, not this one: the sample stays
			// executing and is handed again when that node has left (wake).
			g.N.Log.Info("run-scoped sample cut by its sampler's node stop; handed again once it leaves", "run", g.ID, "seq_id", d.SeqID)
			return nil, nil
		}
		return nil, g.PutBack(d.SeqID) // cut by this node's stop: it runs again after the next start
	}
	prices, err := g.Prices(g.run.Tenant, g.run.SessionID)
	if err != nil {
		return nil, err
	}
	var next advanced
	err = g.write(func(tx persistence.Tx, r *persistence.Run) error {
		op, err := g.Op(tx, d.SeqID)
		if err != nil {
			return err
		}
		now := g.N.Now()
		if err := oplog.EndWith(op, d, prices, now); err != nil {
			return err
		}
		if d.SnapshotSeq > 0 {
			r.SnapshotSeq = d.SnapshotSeq
		}
		switch {
		case d.Status == states.OpSucceeded && executor.KindOf(op.Kind).Mutates:
			r.StateSeq, r.Steps = d.SeqID, d.Steps
		case d.Status == states.OpFailed && executor.KindOf(op.Kind).Mutates && !states.Terminal(states.RunMoves, r.Status) && r.Status != states.RunCancelRequested:
			r.ErrorCode = d.Code
			if err := states.Move(states.RunMoves, &r.Status, states.RunPoisoned); err != nil {
				return err
			}
		}
		if d.Status == states.OpSucceeded {
			if err := artifacts.RecordOutputs(tx, r, op, d); err != nil {
				return err
			}
			if err := g.recordWeights(tx, r, d.WeightVersion, now); err != nil {
				return err
			}
		}
		if d.Metrics != nil {
			m := persistence.Metric{SeqID: d.SeqID, Kind: op.Kind, Step: r.Steps, Values: d.Metrics, DurationMS: d.DurationMS, CreatedAt: now}
			if err := tx.Put(persistence.Metrics, persistence.SeqKey(r.ID, d.SeqID), &m); err != nil {
				return err
			}
		}
		if err := g.PutOp(tx, op); err != nil {
			return err
		}
		next = advanced{}
		if r.Status == states.RunPoisoned {
			return nil
		}
		var aerr error
		next, aerr = g.advance(tx, r, g.Queue, providers.SharesPasses(prices.Provider))
		return aerr
	})
	if err != nil {
		return nil, fmt.Errorf("record operation %d: %w", d.SeqID, err)
	}
	g.Executing = 0
	if d.WeightVersion > 0 {
		g.N.Sampler(g.run.SamplerID).Weights(protocol.WeightsUpdate{Version: d.WeightVersion})
	}
	if g.run.Status == states.RunPoisoned {
		g.stopWork(protocol.CodePoisoned, "an earlier operation that changes the trainer failed")
		g.ended()
		return nil, nil
	}
	g.started(next)
	return nil, nil
}

// recordWeights records a weight version saved for the run's sampler, and
// creates the sampler the first time (provisioning; it syncs once told).
func (g *Grain) recordWeights(tx persistence.Tx, r *persistence.Run, version int64, now time.Time) error {
	if version <= r.LatestWeightVersion {
		return nil
	}
	r.LatestWeightVersion, r.WeightsSeq = version, r.StateSeq
	if r.SamplerID != "" {
		return nil
	}
	r.SamplerID = protocol.SamplerID(r.ID)
	sm := persistence.Sampler{ID: r.SamplerID, Tenant: r.Tenant, SessionID: r.SessionID, RunID: r.ID, BaseModel: r.BaseModel,
		Status: states.SamplerProvisioning, NextSeqID: 1, LastActivityAt: now, CreatedAt: now, UpdatedAt: now}
	if err := tx.Put(persistence.Samplers, []byte(sm.ID), &sm); err != nil {
		return err
	}
	return tx.Put(persistence.Heads, []byte(sm.ID), &persistence.Head{NextSeqID: 1})
}

// handOff records the weights a run-scoped sample runs at (creating the
// sampler if needed) and gives the sample to the sampler; the operation
// stays executing until the sampler reports its outcome here.
func (g *Grain) handOff(d *executor.Done) error {
	var body json.RawMessage
	err := g.write(func(tx persistence.Tx, r *persistence.Run) error {
		op, err := g.Op(tx, d.SeqID)
		if err != nil {
			return err
		}
		body = op.Payload
		return g.recordWeights(tx, r, d.WeightVersion, g.N.Now())
	})
	if err != nil {
		return fmt.Errorf("hand operation %d to the sampler: %w", d.SeqID, err)
	}
	g.handed = &protocol.RunSample{RunEpoch: g.Epoch, SeqID: d.SeqID, Payload: body, Version: d.WeightVersion}
	g.N.Sampler(g.run.SamplerID).SampleForRun(*g.handed)
	return nil
}

// wake answers a node's wake-up after members left (it activates the
// grain, which recovers): a run-scoped sample still executing is handed
// again (its sampler may have been on a node that left), and a queue left
// waiting starts.
func (g *Grain) wake(actor.Context, grain.In) (any, error) {
	if g.handedNow(g.Executing) {
		g.N.Sampler(g.run.SamplerID).SampleForRun(*g.handed)
	}
	g.kick()
	return struct{}{}, nil
}

// handedNow tells whether seq is the executing operation, handed by this
// activation to the run's sampler.
func (g *Grain) handedNow(seq int64) bool {
	h := g.handed
	return h != nil && seq != 0 && h.SeqID == seq && seq == g.Executing && h.RunEpoch == g.Epoch
}

func (g *Grain) execProgress(_ actor.Context, in grain.In) (any, error) {
	p, err := oplog.ProgressReport(in, g.Epoch, g.Executing)
	if p == nil {
		return nil, err
	}
	return nil, g.write(func(tx persistence.Tx, _ *persistence.Run) error {
		return g.MarkProgress(tx, p, g.N.Now())
	})
}
