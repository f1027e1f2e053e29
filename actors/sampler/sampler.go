// Package sampler is the sampler grain: one per run that has saved
// weights for sampling, it admits sample and logprobs operations in its own
// seq_id order, parks them until it holds the weight version they require,
// runs them on the sampling executor, follows its run's weights, and serves
// the run's run-scoped samples.
package sampler

import (
	"fmt"
	"slices"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/oplog"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/cluster"
	"github.com/wts-project/wts/persistence"
)

// Grain owns one sampler: it accepts sample and logprobs operations
// in the sampler's own seq_id order, keeps them parked until the sampler
// holds the weight version they require, runs them one at a time on the
// sampling executor, and follows the run's saved weights (syncing to each
// new version). It also serves its run's run-scoped samples, which are the
// run's operations: it only runs them and reports to the run.
type Grain struct {
	oplog.Owner
	rec      *persistence.Sampler
	syncing  int64                   // the weight version a sync in flight loads, 0 if none
	latest   int64                   // the run's latest weight version
	runEnded bool                    // the run is terminal: latest is final
	forRun   []*executor.SamplingJob // run-scoped samples waiting for their weight version
	// ranForRun is the last run-scoped sample this activation gave its
	// executor: the run hands it again when woken, and the executor still
	// has it (it reports to the run).
	ranForRun handRef
	failedAt  int64 // the version whose sync failed: not retried until a newer one
	// waits holds, by seq_id, the weight version each queued operation
	// requires (nil: none), and parsed the parsed payloads of those near
	// the head (as a run's grain keeps them), so that a payload is parsed
	// once, when it is admitted; an entry leaves with its operation (one
	// recovered after a restart is parsed again once).
	waits  map[int64]*int64
	parsed map[int64]payload.Parsed
}

// New is a sampler grain of node n: the kind's producer.
func New(n *protocol.Node) actor.Actor {
	return &Grain{Owner: oplog.Owner{Base: grain.Base{RT: n.Runtime}, N: n}}
}

func (g *Grain) Receive(ctx actor.Context) {
	if g.Methods == nil {
		g.Methods = map[string]grain.Handler{
			protocol.SamplerSubmit:       g.submit,
			protocol.SamplerWeights:      g.weights,
			protocol.SamplerSynced:       g.synced,
			protocol.SamplerExecStarted:  g.execStarted,
			protocol.SamplerExecDone:     g.execDone,
			protocol.SamplerExecProgress: g.execProgress,
			protocol.SamplerSampleForRun: g.sampleForRun,
			protocol.SamplerRemind:       g.remind,
			protocol.SamplerRunEnded:     g.runEnd,
			protocol.SamplerRetire:       g.retire,
			protocol.SamplerWake:         protocol.Awake,
			protocol.SamplerCancelOp:     g.cancelOp,
		}
		g.Load = func() (string, int, int64) { return g.rec.Tenant.Org, g.Depth(), g.Held() }
		// A sampler whose sync is in flight awaits its report, and
		// run-scoped samples waiting for a version live only here.
		g.Idle = func() bool { return g.Executing == 0 && len(g.Queue) == 0 && len(g.forRun) == 0 && g.syncing == 0 }
	}
	g.Handle(ctx, g.activate, g.kick)
}

// activate takes the sampler's lease and recovers: an operation found
// executing was cut off and queues again first (sampling changes nothing,
// so it simply runs again; one the node died under too often fails
// as interrupted); pending and parked ones queue again.
func (g *Grain) activate() error {
	var run persistence.Run
	err := g.N.Store.Update(func(tx persistence.Tx) error {
		r := new(persistence.Sampler)
		if ok, err := tx.Get(persistence.Samplers, []byte(g.ID), r); err != nil || !ok {
			if err == nil {
				err = protocol.NotFound("sampler", g.ID)
			}
			return err
		}
		if _, err := tx.Get(persistence.Runs, []byte(r.RunID), &run); err != nil {
			return err
		}
		h, lerr := g.TakeLease(tx)
		if lerr != nil {
			return lerr
		}
		r.NextSeqID = h.NextSeqID
		g.Queue, g.Executing, g.waits, g.parsed = g.Queue[:0], 0, map[int64]*int64{}, map[int64]payload.Parsed{}
		now := g.N.Now()
		err := persistence.ScanOps(tx, g.ID, 0, func(op *persistence.Operation) error {
			switch op.Status {
			case states.OpExecuting:
				requeued, err := oplog.Requeue(op, now)
				if err != nil {
					return err
				}
				if requeued {
					g.Queue = append(g.Queue, op.SeqID)
				}
				return g.PutOp(tx, op)
			case states.OpPending, states.OpParked:
				g.Queue = append(g.Queue, op.SeqID)
			}
			return nil
		})
		if err != nil {
			return err
		}
		g.rec = r
		return nil
	})
	g.latest, g.runEnded = run.LatestWeightVersion, states.Terminal(states.RunMoves, run.Status)
	if err == nil && g.rec.Status == states.SamplerReady {
		g.N.Reminders.At(g.reminder(), g.rec.LastActivityAt.Add(g.N.SamplerIdle))
	}
	return err
}

// reminder is the key of the sampler's idle reminder.
func (g *Grain) reminder() string { return protocol.ReminderKey(protocol.SamplerKind, g.ID) }

// write commits fn's changes to a copy of the sampler record, fenced by the
// activation's epoch, and makes the copy the grain's once durable.
func (g *Grain) write(fn func(tx persistence.Tx, r *persistence.Sampler) error) error {
	var next *persistence.Sampler
	err := g.HeadTx(func(tx persistence.Tx) (int64, error) {
		r := *g.rec
		if err := fn(tx, &r); err != nil {
			return 0, err
		}
		r.UpdatedAt = g.N.Now()
		next = &r
		return r.NextSeqID, tx.Put(persistence.Samplers, []byte(g.ID), &r)
	})
	if err == nil {
		g.rec = next
	}
	return err
}

func (g *Grain) submit(_ actor.Context, in grain.In) (any, error) { return g.Admit(in, g) }

// What the sampler gives oplog.Admit.
func (g *Grain) Tenant() persistence.Tenant { return g.rec.Tenant }
func (g *Grain) NextSeq() int64             { return g.rec.NextSeqID }

func (g *Grain) Takes() error {
	if g.rec.Status == states.SamplerRetired {
		return protocol.Refuse(protocol.CodeSamplerNotServing, "sampler %s is retired", g.ID)
	}
	return nil
}

func (g *Grain) Rules() (*oplog.Rules, error) {
	return g.RulesFor(executor.OnSampler, g.rec.Tenant, g.rec.SessionID, g.rec.BaseModel, nil)
}

// Accept writes an admitted operation: pending, or parked until the
// sampler holds the weight version it requires (failed at once when the
// ended run never saved that version).
func (g *Grain) Accept(sub *protocol.Submission, key []byte, parsed payload.Parsed, hold int64) (*persistence.Operation, error) {
	required := payload.Required(parsed)
	var op *persistence.Operation
	err := g.write(func(tx persistence.Tx, r *persistence.Sampler) error {
		now := g.N.Now()
		first := states.OpPending // an operation that waits for a weight version starts parked
		if required != nil && *required > r.SyncedWeightVersion {
			first = states.OpParked
		}
		op = &persistence.Operation{
			ID: protocol.NewID(protocol.OperationPrefix), SessionID: r.SessionID, RunID: r.RunID, SeqID: r.NextSeqID,
			Kind: sub.Kind, Status: first, CreatedAt: now, UpdatedAt: now,
			IdempotencyKey: sub.IdempotencyKey, RequestHash: sub.RequestHash, Payload: sub.Payload, HoldMicroUSD: hold,
		}
		if required != nil && *required > g.latest && g.runEnded {
			if err := oplog.Settle(op, states.OpFailed, protocol.CodeUnreachable, fmt.Sprintf(
				"weight version %d can never be reached: the run ended at version %d", *required, g.latest), now); err != nil {
				return err
			}
		}
		r.NextSeqID++
		r.LastActivityAt = now
		return g.PutAccepted(tx, op, key)
	})
	if err != nil {
		return nil, err
	}
	g.N.Metrics.Accepted(sub.Kind)
	if op.Status == states.OpPending || op.Status == states.OpParked {
		g.waits[op.SeqID] = required
		if len(g.Queue) < oplog.ParsedKeep {
			g.parsed[op.SeqID] = parsed
		}
		g.Queue = append(g.Queue, op.SeqID)
		g.kick()
	}
	return op, nil
}

// run hands a sampler operation to the sampling executor, at the sampler's
// synced weights, with its payload parsed if the grain has it; it is
// pending until the executor starts it (sampler.exec_started).
func (g *Grain) run(op *persistence.Operation, p payload.Parsed) {
	g.Executing = op.SeqID
	g.N.Sample(&executor.SamplingJob{SamplerID: g.ID, RunID: g.rec.RunID, BaseModel: g.rec.BaseModel, Version: g.rec.SyncedWeightVersion,
		Epoch: g.Epoch, SeqID: op.SeqID, Kind: op.Kind, Payload: op.Payload, ReplyID: g.ID, Parsed: p})
}

func (g *Grain) weights(_ actor.Context, in grain.In) (any, error) {
	w, err := grain.Decode[protocol.WeightsUpdate](in)
	if err != nil {
		return nil, err
	}
	g.latest = max(g.latest, w.Version)
	g.kick()
	return struct{}{}, nil
}

// runEnd is the run's end: its latest version is final, so parked
// operations that want more can never run.
func (g *Grain) runEnd(_ actor.Context, in grain.In) (any, error) {
	w, err := grain.Decode[protocol.WeightsUpdate](in)
	if err != nil {
		return nil, err
	}
	g.latest, g.runEnded = max(g.latest, w.Version), true
	g.failUnreachable()
	g.kick()
	return struct{}{}, nil
}

// failUnreachable fails the queued operations whose required version is
// past the ended run's last one.
func (g *Grain) failUnreachable() {
	var left []int64
	err := g.N.Store.Update(func(tx persistence.Tx) (err error) {
		now := g.N.Now()
		left, err = g.SweepQueue(tx, g.Queue, func(op *persistence.Operation) (bool, bool, error) {
			req := g.required(op)
			if req == nil || *req <= g.latest {
				return false, true, nil
			}
			return true, false, oplog.Settle(op, states.OpFailed, protocol.CodeUnreachable, fmt.Sprintf("weight version %d can never be reached: the run ended at version %d", *req, g.latest), now)
		})
		return err
	})
	if err != nil {
		g.N.Log.Error("fail unreachable sampler operations", "sampler", g.ID, "err", err)
		return
	}
	g.keepQueued(left)
}

// required is the weight version a queued operation waits for.
func (g *Grain) required(op *persistence.Operation) *int64 {
	if v, ok := g.waits[op.SeqID]; ok {
		return v
	}
	p, err := executor.Parse(op.Kind, op.Payload)
	if err != nil {
		return nil
	}
	v := payload.Required(p)
	g.waits[op.SeqID] = v
	return v
}

// keepQueued makes left the queue, forgetting what the grain held for the
// operations that left it.
func (g *Grain) keepQueued(left []int64) {
	for _, seq := range g.Queue {
		if !slices.Contains(left, seq) {
			g.forget(seq)
		}
	}
	g.Queue = left
}

// forget drops what the grain held for a queued operation.
func (g *Grain) forget(seq int64) {
	delete(g.waits, seq)
	delete(g.parsed, seq)
}

// kick moves the sampler on: it syncs to the run's latest weights when
// behind (or when released), unparks what the synced version satisfies,
// and starts the next run-scoped sample or, in seq order, operation.
func (g *Grain) kick() {
	if g.Err != nil || g.rec.Status == states.SamplerRetired || g.syncing != 0 {
		return
	}
	if g.latest > 0 && g.latest > g.failedAt &&
		(g.latest > g.rec.SyncedWeightVersion || g.rec.Status == states.SamplerAbsent || g.rec.Status == states.SamplerProvisioning) {
		g.sync(g.latest)
		return
	}
	if g.rec.Status != states.SamplerReady {
		return
	}
	// Run-scoped samples go as soon as the sampler holds their version: they
	// are the run's operations, ordered by the run, not by this queue.
	waiting := g.forRun[:0]
	for _, j := range g.forRun {
		if j.Version > g.rec.SyncedWeightVersion {
			waiting = append(waiting, j)
			continue
		}
		j.Version = g.rec.SyncedWeightVersion
		g.ranForRun = handOf(j)
		g.N.Sample(j)
	}
	g.forRun = waiting
	if g.Executing != 0 || len(g.Queue) == 0 {
		return
	}
	seq := g.Queue[0]
	var op *persistence.Operation
	err := g.N.Store.View(func(tx persistence.Tx) (err error) {
		op, err = g.Op(tx, seq)
		return err
	})
	if err != nil {
		g.N.Log.Error("start sampler operation", "sampler", g.ID, "seq", seq, "err", err)
		return
	}
	if req := g.required(op); op.Status != states.OpPending || req != nil && *req > g.rec.SyncedWeightVersion {
		return // parked: the sampler follows the run and will get there
	}
	g.Queue = g.Queue[1:]
	g.run(op, g.parsed[seq])
	g.forget(seq)
}

// sync loads version into the sampling executor: syncing from ready,
// provisioning from absent (or at creation).
func (g *Grain) sync(version int64) {
	err := g.write(func(_ persistence.Tx, r *persistence.Sampler) error {
		switch r.Status {
		case states.SamplerReady, states.SamplerFailed:
			return states.Move(states.SamplerMoves, &r.Status, states.SamplerSyncing)
		case states.SamplerAbsent:
			return states.Move(states.SamplerMoves, &r.Status, states.SamplerProvisioning)
		}
		return nil // provisioning or syncing already (an activation after a crash)
	})
	if err != nil {
		g.N.Log.Error("sampler sync", "sampler", g.ID, "err", err)
		return
	}
	g.syncing = version
	g.N.Sample(&executor.SamplingJob{SamplerID: g.ID, RunID: g.rec.RunID, BaseModel: g.rec.BaseModel, Version: version, Epoch: g.Epoch})
}

func (g *Grain) synced(_ actor.Context, in grain.In) (any, error) {
	s, err := grain.Decode[executor.Synced](in)
	if err != nil || s.Epoch != g.Epoch || s.Version != g.syncing {
		return nil, err
	}
	g.syncing = 0
	if s.Code != "" {
		return nil, g.syncFailed(s)
	}
	err = g.write(func(tx persistence.Tx, r *persistence.Sampler) error {
		r.SyncedWeightVersion, r.ErrorCode = s.Version, ""
		if err := states.Move(states.SamplerMoves, &r.Status, states.SamplerReady); err != nil {
			return err
		}
		now := g.N.Now()
		_, err := g.SweepQueue(tx, g.Queue, func(op *persistence.Operation) (bool, bool, error) {
			if req := g.required(op); op.Status == states.OpParked && (req == nil || *req <= s.Version) {
				op.UpdatedAt = now
				return true, true, states.Move(states.OpMoves, &op.Status, states.OpPending)
			}
			return false, true, nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	g.N.Reminders.At(g.reminder(), g.N.Now().Add(g.N.SamplerIdle))
	g.kick()
	return nil, nil
}

// syncFailed records a sync that could not load its version: the sampler
// is failed until the run saves a newer one, and the work that needed this
// version or none in particular fails with it (work that requires a later
// version stays parked).
func (g *Grain) syncFailed(s *executor.Synced) error {
	g.failedAt = s.Version
	g.N.Log.Error("sampler sync failed", "sampler", g.ID, "version", s.Version, "code", s.Code, "message", s.Message)
	msg := fmt.Sprintf("the sampler could not load weight version %d: %s", s.Version, s.Message)
	var left []int64
	err := g.write(func(tx persistence.Tx, r *persistence.Sampler) (err error) {
		r.ErrorCode = s.Code
		if err := states.Move(states.SamplerMoves, &r.Status, states.SamplerFailed); err != nil {
			return err
		}
		now := g.N.Now()
		left, err = g.SweepQueue(tx, g.Queue, func(op *persistence.Operation) (bool, bool, error) {
			if req := g.required(op); req != nil && *req > s.Version {
				return false, true, nil
			}
			return true, false, oplog.Settle(op, states.OpFailed, protocol.CodeSamplerFailed, msg, now)
		})
		return err
	})
	if err != nil {
		return err
	}
	g.keepQueued(left)
	waiting := g.forRun[:0]
	for _, j := range g.forRun {
		if j.Version > s.Version {
			waiting = append(waiting, j)
			continue
		}
		g.N.Run(j.ReplyID).ExecDone(&executor.Done{Epoch: j.Epoch, SeqID: j.SeqID, Status: states.OpFailed, Code: protocol.CodeSamplerFailed, Message: msg})
	}
	g.forRun = waiting
	return nil
}

// execStarted marks the operation the sampling executor began.
func (g *Grain) execStarted(_ actor.Context, in grain.In) (any, error) {
	st, err := oplog.StartReport(in, g.Epoch, g.Executing)
	if st == nil {
		return nil, err
	}
	return nil, g.write(func(tx persistence.Tx, r *persistence.Sampler) error {
		r.LastActivityAt = g.N.Now()
		return g.MarkExecuting(tx, st.SeqID, r.LastActivityAt)
	})
}

// execProgress records the sampling executor's progress on the executing
// operation: tokens and sequences so far.
func (g *Grain) execProgress(_ actor.Context, in grain.In) (any, error) {
	p, err := oplog.ProgressReport(in, g.Epoch, g.Executing)
	if p == nil {
		return nil, err
	}
	return nil, g.write(func(tx persistence.Tx, _ *persistence.Sampler) error {
		return g.MarkProgress(tx, p, g.N.Now())
	})
}

func (g *Grain) execDone(_ actor.Context, in grain.In) (any, error) {
	d, err := oplog.Outcome(in, g.Epoch, g.Executing)
	if d == nil {
		return nil, err
	}
	if d.Status == states.OpPending { // cut by the node's stop: it runs again after the next start
		return nil, g.PutBack(d.SeqID)
	}
	prices, err := g.Prices(g.rec.Tenant, g.rec.SessionID)
	if err != nil {
		return nil, err
	}
	err = g.write(func(tx persistence.Tx, r *persistence.Sampler) error {
		op, err := g.Op(tx, d.SeqID)
		if err != nil {
			return err
		}
		now := g.N.Now()
		if err := oplog.EndWith(op, d, prices, now); err != nil {
			return err
		}
		r.LastActivityAt = now
		return g.PutOp(tx, op)
	})
	if err != nil {
		return nil, fmt.Errorf("record sampler operation %d: %w", d.SeqID, err)
	}
	g.Executing = 0
	g.kick()
	return nil, nil
}

func (g *Grain) sampleForRun(_ actor.Context, in grain.In) (any, error) {
	rs, err := grain.Decode[protocol.RunSample](in)
	if err != nil {
		return nil, err
	}
	g.latest = max(g.latest, rs.Version)
	j := &executor.SamplingJob{SamplerID: g.ID, RunID: g.rec.RunID, BaseModel: g.rec.BaseModel, Version: rs.Version,
		Epoch: rs.RunEpoch, SeqID: rs.SeqID, Kind: payload.Sample, Payload: rs.Payload, ForRun: true, ReplyID: g.rec.RunID}
	if handOf(j) == g.ranForRun || slices.ContainsFunc(g.forRun, func(w *executor.SamplingJob) bool { return handOf(w) == handOf(j) }) {
		return struct{}{}, nil // handed again: already running or waiting here
	}
	g.forRun = append(g.forRun, j)
	g.kick()
	return struct{}{}, nil
}

// handRef names a run-scoped sample: the run's activation and the seq_id.
type handRef struct {
	epoch uint64
	seq   int64
}

func handOf(j *executor.SamplingJob) handRef { return handRef{j.Epoch, j.SeqID} }

// remind is the idle reminder: a sampler nobody has used for SamplerIdle
// is released (its adapter leaves the executor's memory, status absent, and
// comes back on the next demand); one used since, or busy, is reminded
// again when it could next be idle.
func (g *Grain) remind(actor.Context, grain.In) (any, error) {
	if g.rec.Status != states.SamplerReady {
		return struct{}{}, nil // it is reminded again when it is next ready
	}
	now := g.N.Now()
	if next := g.rec.LastActivityAt.Add(g.N.SamplerIdle); next.After(now) {
		g.N.Reminders.At(g.reminder(), next)
		return struct{}{}, nil
	}
	if g.Executing != 0 || len(g.Queue) > 0 || len(g.forRun) > 0 {
		g.N.Reminders.At(g.reminder(), now.Add(g.N.SamplerIdle))
		return struct{}{}, nil
	}
	err := g.write(func(_ persistence.Tx, r *persistence.Sampler) error {
		return states.Move(states.SamplerMoves, &r.Status, states.SamplerAbsent)
	})
	if err == nil {
		g.N.SamplingRelease(g.ID)
	}
	return struct{}{}, err
}

// cancelOp cancels operation seq of the sampler: a queued one at once, an executing one at its next decoding step.
func (g *Grain) cancelOp(_ actor.Context, in grain.In) (any, error) {
	seq, err := grain.Decode[int64](in)
	if err != nil {
		return nil, err
	}
	if *seq == g.Executing {
		g.N.SamplingCancel(executor.SamplingRef{ReplyID: g.ID, SeqID: *seq})
	}
	var op *persistence.Operation
	err = g.write(func(tx persistence.Tx, _ *persistence.Sampler) error {
		var err error
		if op, err = g.Op(tx, *seq); err != nil || states.Terminal(states.OpMoves, op.Status) || *seq == g.Executing {
			return err
		}
		if err := oplog.Settle(op, states.OpCancelled, protocol.CodeCancelled, "the operation was cancelled", g.N.Now()); err != nil {
			return err
		}
		return g.PutOp(tx, op)
	})
	if err != nil {
		return nil, err
	}
	if op.Status == states.OpCancelled {
		g.Queue = slices.DeleteFunc(g.Queue, func(q int64) bool { return q == *seq })
		g.forget(*seq)
		g.kick()
	}
	c := *op
	c.Payload = nil
	return &c, nil
}

// retire ends the sampler with its run: queued operations are cancelled,
// its adapter leaves memory, and it takes no more work.
func (g *Grain) retire(actor.Context, grain.In) (any, error) {
	if g.rec.Status == states.SamplerRetired {
		return struct{}{}, nil
	}
	err := g.write(func(tx persistence.Tx, r *persistence.Sampler) error {
		now := g.N.Now()
		_, err := g.SweepQueue(tx, g.Queue, func(op *persistence.Operation) (bool, bool, error) {
			return true, false, oplog.Settle(op, states.OpCancelled, protocol.CodeCancelled, "the sampler was retired with its run", now)
		})
		if err != nil {
			return err
		}
		if err := cluster.Forget(tx, protocol.SamplerKind, g.ID); err != nil {
			return err
		}
		return states.Move(states.SamplerMoves, &r.Status, states.SamplerRetired)
	})
	if err != nil {
		return nil, err
	}
	g.Queue, g.forRun, g.waits, g.parsed = nil, nil, map[int64]*int64{}, map[int64]payload.Parsed{}
	if g.Executing != 0 {
		g.N.SamplingCancel(executor.SamplingRef{ReplyID: g.ID, SeqID: g.Executing})
	}
	g.N.SamplingRelease(g.ID)
	return struct{}{}, nil
}
