// Package oplog is what a run's and a sampler's grains share: each owns a
// sequence of operations, admitted in seq_id order with idempotency (the
// one admission path, Admit), written fenced by the owner's head (its
// activation epoch and next seq_id), handed to an executor and settled by
// the executor's report.
package oplog

import (
	"fmt"
	"time"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/actors/usage"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers/ledger"
)

// Owner is what a run and a sampler grain share: the grain and its node,
// the activation's fence, and memos of the records only this activation writes
// while its epoch holds the lease (its Head and its queued or executing
// operations), so that its write functions, which run in the store's serial
// commit loop, do not read back and decode what the grain wrote itself
// (persistence.Memo checks the stored bytes on every read, so a failed write
// only costs a decode).
type Owner struct {
	grain.Base
	N *protocol.Node
	// Epoch is this activation's: every job it gives an executor carries
	// it, and a report about an older one is dropped.
	Epoch uint64
	// Queue is the accepted operations not started, in seq order;
	// Executing the one on an executor (0 if none).
	Queue     []int64
	Executing int64
	prices    *usage.Prices // the session's billing snapshot, read once
	rules     *Rules        // what submissions are checked against, built once
	head      persistence.Memo[persistence.Head]
	ops       map[int64]*persistence.Memo[persistence.Operation] // by seq_id; an ended one leaves
	// opBytes is what the memos in ops hold, kept as they change: admission
	// control reads it after every message the grain handles.
	opBytes int64
}

// HeadTx runs fn in a store transaction fenced by the owner's head: refused
// (grain.ErrFenced) unless the activation's epoch still holds the
// lease, and the head's next seq_id set to what fn returns.
func (o *Owner) HeadTx(fn func(tx persistence.Tx) (int64, error)) error {
	return o.fenced(func(tx persistence.Tx, h persistence.Head) error {
		next, err := fn(tx)
		if err != nil || next == h.NextSeqID {
			return err
		}
		h.NextSeqID = next
		return o.head.Put(tx, persistence.Heads, []byte(o.ID), h)
	})
}

// Owns confirms with a read of the store that this activation still holds
// its grain's lease (grain.ErrFenced if not). A refusal drawn from what the
// activation holds in memory (a seq_id that is not the next one) asks it
// first: an activation that a newer one replaced, while two members
// disagreed about the grain's placement, would answer from stale state.
func (o *Owner) Owns() error {
	var h persistence.Head
	err := o.N.Store.View(func(tx persistence.Tx) error {
		_, err := tx.Get(persistence.Heads, []byte(o.ID), &h)
		return err
	})
	if err == nil && h.Epoch != o.Epoch {
		return grain.ErrFenced
	}
	return err
}

// Fenced runs fn in a store transaction fenced by the owner's head, as
// HeadTx does, for a change that leaves the owner's record and head alone.
func (o *Owner) Fenced(fn func(tx persistence.Tx) error) error {
	return o.fenced(func(tx persistence.Tx, _ persistence.Head) error { return fn(tx) })
}

func (o *Owner) fenced(fn func(tx persistence.Tx, h persistence.Head) error) error {
	return o.N.Store.Update(func(tx persistence.Tx) error {
		h, _, err := o.head.Get(tx, persistence.Heads, []byte(o.ID))
		if err != nil {
			return err
		}
		if h.Epoch != o.Epoch {
			return grain.ErrFenced
		}
		return fn(tx, h)
	})
}

// Prices is the price list of the owner's session (tenant t's sessionID),
// read once per activation: the snapshot never changes.
func (o *Owner) Prices(t persistence.Tenant, sessionID string) (*usage.Prices, error) {
	return usage.PricesOf(o.N.Store, &o.prices, t, sessionID)
}

// RulesFor is the owner's Rules, built once per activation: the kinds its
// session's capability row offers at scope, and its base model's shape; run
// is the run whose checkpoints its operations may name (nil for a
// sampler).
func (o *Owner) RulesFor(scope executor.Scope, t persistence.Tenant, sessionID, baseModel string, run *persistence.Run) (*Rules, error) {
	if o.rules != nil {
		return o.rules, nil
	}
	prices, err := o.Prices(t, sessionID)
	if err != nil {
		return nil, err
	}
	row := o.N.Registry.Row(prices.Provider)
	what, offered := "run", row.Operations
	if scope == executor.OnSampler {
		what, offered = "sampler", row.SamplerOperations
	}
	m, ok := o.N.Registry.Catalog().Lookup(baseModel)
	if !ok { // a cluster node whose catalog lacks it (placement avoids that when it can)
		return nil, protocol.Refuse(protocol.CodeModelUnavailable, "base model %q is not in this node's catalog", baseModel)
	}
	o.rules = &Rules{What: what, Scope: scope, Offered: offered, Model: m.Config, Params: int64(m.Config.ParamCount()), Run: run}
	return o.rules, nil
}

// Depth is the number of the owner's operations queued or executing.
func (o *Owner) Depth() int {
	if o.Executing != 0 {
		return len(o.Queue) + 1
	}
	return len(o.Queue)
}

// TakeLease bumps the owner's activation epoch (inside an activation's
// transaction), makes it this activation's and returns the head.
func (o *Owner) TakeLease(tx persistence.Tx) (persistence.Head, error) {
	h, _, err := o.head.Get(tx, persistence.Heads, []byte(o.ID))
	if err != nil {
		return h, err
	}
	h.Epoch++
	o.Epoch = h.Epoch
	return h, o.head.Put(tx, persistence.Heads, []byte(o.ID), h)
}

// Op reads the owner's operation seq inside tx (the zero operation if there
// is none), as a copy the caller may change by assignment.
func (o *Owner) Op(tx persistence.Tx, seq int64) (*persistence.Operation, error) {
	m := o.memo(seq)
	before := m.Size()
	op, ok, err := m.Get(tx, persistence.Ops, persistence.SeqKey(o.ID, seq))
	if !ok || states.Terminal(states.OpMoves, op.Status) {
		delete(o.ops, seq)
		o.opBytes -= int64(before)
	} else {
		o.opBytes += int64(m.Size() - before)
	}
	return &op, err
}

// memo is operation seq's memo, made if it has none.
func (o *Owner) memo(seq int64) *persistence.Memo[persistence.Operation] {
	m := o.ops[seq]
	if m == nil {
		if o.ops == nil {
			o.ops = map[int64]*persistence.Memo[persistence.Operation]{}
		}
		m = new(persistence.Memo[persistence.Operation])
		o.ops[seq] = m
	}
	return m
}

// PutOp writes one of the owner's operations inside tx, through its memo
// while it is queued or executing; an ended one is not read again by its
// grain, and leaves the memos.
func (o *Owner) PutOp(tx persistence.Tx, op *persistence.Operation) error {
	key := persistence.SeqKey(o.ID, op.SeqID)
	if states.Terminal(states.OpMoves, op.Status) {
		ending := !op.Charged // the write that ends it, not a later one
		if err := ledger.Charge(tx, op, o.N.Now()); err != nil {
			return err
		}
		if ending {
			if err := usage.MarkDue(tx, o.ID, op, o.N.SettleAfter); err != nil {
				return err
			}
		}
		if m := o.ops[op.SeqID]; m != nil {
			o.opBytes -= int64(m.Size())
			delete(o.ops, op.SeqID)
		}
		return tx.Put(persistence.Ops, key, op)
	}
	m := o.memo(op.SeqID)
	before := m.Size()
	err := m.Put(tx, persistence.Ops, key, *op)
	o.opBytes += int64(m.Size() - before)
	return err
}

// repeated answers a submission whose idempotency key owner has seen: the
// original operation, or a conflict when the request hash differs. It
// returns nil, nil for a new key.
func repeated(st persistence.Store, owner string, key []byte, sub *protocol.Submission) (*protocol.Accepted, error) {
	op, err := ExistingOp(st, owner, key)
	if err != nil || op == nil {
		return nil, err
	}
	if op.RequestHash != sub.RequestHash {
		return nil, protocol.Refuse(protocol.CodeIdempotencyConflict, "idempotency_key %q was used for operation %s (seq_id %d) with another request_hash", sub.IdempotencyKey, op.ID, op.SeqID)
	}
	return Handle(op, false), nil
}

// ExistingOp returns the operation of owner (a run or a sampler) that an
// idempotency key already names, if any.
func ExistingOp(st persistence.Store, owner string, key []byte) (*persistence.Operation, error) {
	var op *persistence.Operation
	err := st.View(func(tx persistence.Tx) error {
		var seq int64
		if ok, err := tx.Get(persistence.Idem, key, &seq); err != nil || !ok {
			return err
		}
		op = new(persistence.Operation)
		_, err := tx.Get(persistence.Ops, persistence.SeqKey(owner, seq), op)
		return err
	})
	return op, err
}

// PutAccepted writes a newly accepted operation of the owner with its id
// index and idempotency entry, its estimated cost (op.HoldMicroUSD) held
// under its session's ceiling.
func (o *Owner) PutAccepted(tx persistence.Tx, op *persistence.Operation, idem []byte) error {
	if err := ledger.Hold(tx, op.SessionID, op.HoldMicroUSD); err != nil {
		return err
	}
	if err := o.PutOp(tx, op); err != nil {
		return err
	}
	key := persistence.SeqKey(o.ID, op.SeqID)
	if err := tx.Put(persistence.Index, []byte(op.ID), key); err != nil {
		return err
	}
	return tx.Put(persistence.Idem, idem, op.SeqID)
}

// Settle ends an operation with status (and an error code and message).
func Settle(op *persistence.Operation, status, code, msg string, now time.Time) error {
	if err := states.Move(states.OpMoves, &op.Status, status); err != nil {
		return fmt.Errorf("operation %d: %w", op.SeqID, err)
	}
	if code != "" {
		op.ErrorCode, op.ErrorMessage = &code, &msg
	}
	op.UpdatedAt = now
	return nil
}

// Held is the bytes the owner's memos hold for its queued and executing
// operations.
func (o *Owner) Held() int64 { return o.opBytes }

// SweepQueue visits the owner's queued operations inside tx: fn may change
// one (and says so, to have it written) and says whether it stays queued. It
// returns the operations that stay, in order.
func (o *Owner) SweepQueue(tx persistence.Tx, queue []int64, fn func(op *persistence.Operation) (changed, stays bool, err error)) ([]int64, error) {
	var left []int64
	for _, seq := range queue {
		op, err := o.Op(tx, seq)
		if err != nil {
			return nil, err
		}
		changed, stays, err := fn(op)
		if err != nil {
			return nil, err
		}
		if stays {
			left = append(left, seq)
		}
		if !changed {
			continue
		}
		if err := o.PutOp(tx, op); err != nil {
			return nil, err
		}
	}
	return left, nil
}

// Outcome decodes an executor's report on an operation and keeps it only
// when it is about the one this activation has executing: a report meant
// for an older activation is dropped (recovery settled that operation).
func Outcome(in grain.In, epoch uint64, executing int64) (*executor.Done, error) {
	d, err := grain.Decode[executor.Done](in)
	if err != nil || d.Epoch != epoch || d.SeqID != executing {
		return nil, err
	}
	return d, nil
}

// StartReport decodes an executor's word that an operation began, kept
// only when it is about the one this activation has executing.
func StartReport(in grain.In, epoch uint64, executing int64) (*executor.Started, error) {
	st, err := grain.Decode[executor.Started](in)
	if err != nil || st.Epoch != epoch || st.SeqID != executing {
		return nil, err
	}
	return st, nil
}

// ProgressReport decodes an executor's progress report: nil unless it is
// on the operation this activation is executing.
func ProgressReport(in grain.In, epoch uint64, executing int64) (*executor.Progress, error) {
	p, err := grain.Decode[executor.Progress](in)
	if err != nil || p.Epoch != epoch || p.SeqID != executing {
		return nil, err
	}
	return p, nil
}

// MarkProgress records progress p on its operation while it executes.
func (o *Owner) MarkProgress(tx persistence.Tx, p *executor.Progress, now time.Time) error {
	op, err := o.Op(tx, p.SeqID)
	if err != nil || op.Status != states.OpExecuting {
		return err
	}
	op.Progress, op.ProgressUpdatedAt, op.UpdatedAt = p.Progress, &now, now
	return o.PutOp(tx, op)
}

// EndWith ends op as report d says, with its result and its usage at
// prices p.
func EndWith(op *persistence.Operation, d *executor.Done, p *usage.Prices, now time.Time) error {
	if err := Settle(op, d.Status, d.Code, d.Message, now); err != nil {
		return err
	}
	op.Result = d.Result
	usage.Record(op, d, p, now)
	return nil
}

// MaxAttempts is how many times the node may die under one operation
// before it fails as interrupted instead of running again: an operation
// that takes the node down every time must not keep doing so.
const MaxAttempts = 3

// Requeue sends an operation its grain finds executing when it activates
// back to pending, counting the attempt; when it has had MaxAttempts, it
// fails as interrupted instead (requeued is false).
func Requeue(op *persistence.Operation, now time.Time) (requeued bool, err error) {
	op.Attempts++
	if op.Attempts >= MaxAttempts {
		return false, FailInterrupted(op, now)
	}
	return true, unstartOp(op, now)
}

// unstartOp sends an executing operation back to pending, its progress
// forgotten.
func unstartOp(op *persistence.Operation, now time.Time) error {
	if err := states.Move(states.OpMoves, &op.Status, states.OpPending); err != nil {
		return fmt.Errorf("operation %d: %w", op.SeqID, err)
	}
	op.Progress, op.ProgressUpdatedAt, op.UpdatedAt = nil, nil, now
	return nil
}

// FailInterrupted settles an operation the node died under MaxAttempts
// times.
func FailInterrupted(op *persistence.Operation, now time.Time) error {
	return Settle(op, states.OpFailed, protocol.CodeInterrupted, fmt.Sprintf("the node stopped %d times while this operation was executing", op.Attempts), now)
}

// MarkExecuting records that the executor began operation seq (if it is
// still pending: a report after a cancel finds it ended).
func (o *Owner) MarkExecuting(tx persistence.Tx, seq int64, now time.Time) error {
	op, err := o.Op(tx, seq)
	if err != nil || op.Status != states.OpPending {
		return err
	}
	if err := states.Move(states.OpMoves, &op.Status, states.OpExecuting); err != nil {
		return err
	}
	op.UpdatedAt = now
	return o.PutOp(tx, op)
}

// PutBack sends the executing operation that the node's stop cut short
// (its executor reported it pending) back to pending, at the head of the
// queue: nothing of it was applied, and it runs after the next start.
func (o *Owner) PutBack(seq int64) error {
	err := o.Fenced(func(tx persistence.Tx) error {
		op, err := o.Op(tx, seq)
		if err != nil || op.Status != states.OpExecuting {
			return err
		}
		if err := unstartOp(op, o.N.Now()); err != nil {
			return err
		}
		return o.PutOp(tx, op)
	})
	if err == nil {
		o.Executing, o.Queue = 0, append([]int64{seq}, o.Queue...)
	}
	return err
}

// Handle is the operation as a caller sees it (its payload stays stored).
func Handle(op *persistence.Operation, created bool) *protocol.Accepted {
	c := *op
	c.Payload = nil
	return &protocol.Accepted{Op: c, Created: created}
}

// ParsedKeep is how many queued operations of a grain keep their parsed
// payload for the job that starts them: deeper ones are parsed again when
// they start, so a long queue of large batches does not hold them all in
// memory.
const ParsedKeep = 4
