package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/wts-project/wts/persistence"
)

// What a run and a sampler share: each owns a sequence of operations,
// accepted in seq_id order with idempotency and fenced by the owner's Head
// (activation epoch and next seq_id).

// headTx runs fn in a store transaction fenced by owner's head: refused
// (errFenced) unless epoch still holds the lease, and the head's next
// seq_id set to what fn returns.
func headTx(s *System, owner string, epoch uint64, fn func(tx *persistence.Tx) (int64, error)) error {
	return s.store.Update(func(tx *persistence.Tx) error {
		var h persistence.Head
		if _, err := tx.Get(persistence.Heads, []byte(owner), &h); err != nil {
			return err
		}
		if h.Epoch != epoch {
			return errFenced
		}
		next, err := fn(tx)
		if err != nil || next == h.NextSeqID {
			return err
		}
		h.NextSeqID = next
		return tx.Put(persistence.Heads, []byte(owner), &h)
	})
}

// takeLease bumps owner's activation epoch (inside an activation's
// transaction) and returns the head.
func takeLease(tx *persistence.Tx, owner string) (persistence.Head, error) {
	var h persistence.Head
	if _, err := tx.Get(persistence.Heads, []byte(owner), &h); err != nil {
		return h, err
	}
	h.Epoch++
	return h, tx.Put(persistence.Heads, []byte(owner), &h)
}

// repeated answers a submission whose idempotency key owner has seen: the
// original operation, or a conflict when the request hash differs. It
// returns nil, nil for a new key.
func repeated(s *System, owner string, key []byte, sub *Submission) (*Accepted, error) {
	op, err := existingOp(s, owner, key)
	if err != nil || op == nil {
		return nil, err
	}
	if op.RequestHash != sub.RequestHash {
		return nil, refuse(CodeIdempotencyConflict, "idempotency_key %q was used for operation %s (seq_id %d) with another request_hash", sub.IdempotencyKey, op.ID, op.SeqID)
	}
	return handle(op, false), nil
}

// existingOp returns the operation of owner (a run or a sampler) that an
// idempotency key already names, if any.
func existingOp(s *System, owner string, key []byte) (*persistence.Operation, error) {
	var op *persistence.Operation
	err := s.store.View(func(tx *persistence.Tx) error {
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

// putAccepted writes a newly accepted operation of owner with its id index
// and idempotency entry.
func putAccepted(tx *persistence.Tx, owner string, op *persistence.Operation, idem []byte) error {
	key := persistence.SeqKey(owner, op.SeqID)
	if err := tx.Put(persistence.Ops, key, op); err != nil {
		return err
	}
	if err := tx.Put(persistence.Index, []byte(op.ID), key); err != nil {
		return err
	}
	return tx.Put(persistence.Idem, idem, op.SeqID)
}

// settle ends an operation.
func settle(op *persistence.Operation, status, code, msg string, now time.Time) {
	op.Status = status
	if code != "" {
		op.ErrorCode, op.ErrorMessage = &code, &msg
	}
	op.UpdatedAt = now
}

// grain is what every grain has: its system, identity, activation failure
// and methods.
type grain struct {
	sys     *System
	id      string
	err     error              // activation failure, answered to every call
	methods map[string]handler // by wire method name
}

// receive is a grain's Receive: on activation it recovers (activate) and
// moves on (resume, if any); a call goes to its method's handler, or is
// answered with the activation's failure.
func (b *grain) receive(ctx actor.Context, activate func() error, resume func()) {
	switch m := ctx.Message().(type) {
	case *pcluster.ClusterInit:
		b.id = m.Identity.Identity
		if b.err = activate(); b.err == nil && resume != nil {
			resume()
		}
	default:
		method, in, isLocal, ok := request(m)
		if !ok {
			return
		}
		h := b.methods[method]
		switch {
		case b.err != nil:
			h = func(actor.Context, msg) (any, error) { return nil, b.err }
		case h == nil:
			h = func(actor.Context, msg) (any, error) { return nil, fmt.Errorf("unknown method %q", method) }
		}
		answer(ctx, b.sys.log, method, in, isLocal, h)
	}
}

// awake answers a call that only activates its grain.
func awake(actor.Context, msg) (any, error) { return struct{}{}, nil }

// admit decodes a submission to the grain and answers what needs no new
// operation: another tenant's (not found, as what) and a repeat of an
// idempotency key (the original). Otherwise it returns the submission and
// its idempotency key, with a nil Accepted.
func (b *grain) admit(in msg, owner persistence.Tenant, what string) (*Submission, []byte, *Accepted, error) {
	sub, err := decode[Submission](in)
	if err != nil {
		return nil, nil, nil, err
	}
	if sub.Tenant != owner {
		return nil, nil, nil, notFound(what, b.id)
	}
	key := persistence.IdemKey(b.id, sub.IdempotencyKey)
	acc, err := repeated(b.sys, b.id, key, sub)
	return sub, key, acc, err
}

// sweepQueue visits owner's queued operations inside tx: fn may change one
// (and says so, to have it written) and says whether it stays queued. It
// returns the operations that stay, in order.
func sweepQueue(tx *persistence.Tx, owner string, queue []int64, fn func(op *persistence.Operation) (changed, stays bool)) ([]int64, error) {
	var left []int64
	for _, seq := range queue {
		op := new(persistence.Operation)
		if _, err := tx.Get(persistence.Ops, persistence.SeqKey(owner, seq), op); err != nil {
			return nil, err
		}
		changed, stays := fn(op)
		if stays {
			left = append(left, seq)
		}
		if !changed {
			continue
		}
		if err := tx.Put(persistence.Ops, persistence.SeqKey(owner, seq), op); err != nil {
			return nil, err
		}
	}
	return left, nil
}

// outcome decodes an executor's report on an operation and keeps it only
// when it is about the one this activation has executing: a report meant
// for an older activation is dropped (recovery settled that operation).
func outcome(in msg, epoch uint64, executing int64) (*done, error) {
	d, err := decode[done](in)
	if err != nil || d.Epoch != epoch || d.SeqID != executing {
		return nil, err
	}
	return d, nil
}

// endWith ends op as report d says, with its result and its usage at
// prices p; trainer: it ran on the run's trainer (see recordUsage).
func endWith(op *persistence.Operation, d *done, p *priceList, now time.Time, trainer bool) {
	settle(op, d.Status, d.Code, d.Message, now)
	op.Result = d.Result
	recordUsage(op, d, p, now, trainer)
}

// failInterrupted settles an operation its grain finds executing when it
// activates: the node stopped under it, and it is never run twice.
func failInterrupted(op *persistence.Operation, now time.Time) {
	settle(op, OpFailed, CodeInterrupted, "the node stopped while this operation was executing", now)
}
