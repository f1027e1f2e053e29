package oplog

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/persistence"
)

// An operation found executing at an activation queues again until the
// node has died under it MaxAttempts times; then it fails interrupted.
func TestRequeueUntilMaxAttempts(t *testing.T) {
	now := time.Now()
	op := &persistence.Operation{SeqID: 1, Status: states.OpExecuting, Progress: []byte(`{"step":1}`)}
	for i := 1; i < MaxAttempts; i++ {
		requeued, err := Requeue(op, now)
		if err != nil || !requeued || op.Status != states.OpPending || op.Progress != nil || op.Attempts != int64(i) {
			t.Fatalf("attempt %d: %v %v %+v", i, requeued, err, op)
		}
		op.Status = states.OpExecuting // the next start's
	}
	requeued, err := Requeue(op, now)
	if err != nil || requeued || op.Status != states.OpFailed || *op.ErrorCode != protocol.CodeInterrupted {
		t.Fatalf("the last attempt: %v %v %+v", requeued, err, op)
	}
	if err := Settle(op, states.OpSucceeded, "", "", now); !errors.Is(err, states.ErrIllegalMove) {
		t.Fatalf("an ended operation settled again: %v", err)
	}
}

// A report is kept only when it is about the operation this activation
// has executing: one for an older activation or another operation is
// dropped without an error.
func TestStaleReportsDropped(t *testing.T) {
	d := &executor.Done{Epoch: 3, SeqID: 7, Status: states.OpSucceeded}
	if got, err := Outcome(grain.Value(d), 3, 7); err != nil || got != d {
		t.Fatalf("the current report: %v %v", got, err)
	}
	for _, c := range []struct {
		epoch uint64
		seq   int64
	}{{2, 7}, {3, 6}} {
		if got, err := Outcome(grain.Value(d), c.epoch, c.seq); err != nil || got != nil {
			t.Fatalf("a report for epoch %d seq %d kept: %v %v", c.epoch, c.seq, got, err)
		}
	}
	st := executor.Started{Epoch: 3, SeqID: 7}
	if got, err := StartReport(grain.Value(st), 4, 7); err != nil || got != nil {
		t.Fatalf("a start for an older activation kept: %v %v", got, err)
	}
}

// A handle carries no payload, and engine input errors keep their code.
func TestHandleAndRefusals(t *testing.T) {
	op := &persistence.Operation{ID: "wto_1", Payload: []byte(`{"big":1}`)}
	if h := Handle(op, true); h.Op.Payload != nil || !h.Created || op.Payload == nil {
		t.Fatalf("handle %+v, stored payload %s", h, op.Payload)
	}
	err := engineRefusal(fmt.Errorf("token 9: %w", kerr.ErrTokenRange))
	if e := protocol.AsError(err); e.Code != "token_out_of_range" {
		t.Fatalf("engine refusal %v", err)
	}
}
