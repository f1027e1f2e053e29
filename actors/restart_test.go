package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/wts-project/wts/actors/oplog"
	"github.com/wts-project/wts/actors/protocol"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
)

// markExecutingOnDisk rewrites a stopped node's operation as the node leaves one
// it dies under: executing, after attempts crashes.
func markExecutingOnDisk(t *testing.T, data, run string, seq, attempts int64) {
	t.Helper()
	st, err := persistence.Open(filepath.Join(data, "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	err = st.Update(func(tx persistence.Tx) error {
		var op persistence.Operation
		if _, err := tx.Get(persistence.Ops, persistence.SeqKey(run, seq), &op); err != nil {
			return err
		}
		op.Status, op.Result, op.ErrorCode, op.ErrorMessage, op.Usage, op.Attempts = states.OpExecuting, nil, nil, nil, nil, attempts
		return tx.Put(persistence.Ops, persistence.SeqKey(run, seq), &op)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// An operation found executing at start goes back to the queue and runs
// again, with the result a node that never stopped gives; one the node
// died under for the third time fails interrupted instead, and, since it
// changes the trainer, so does its run.
func TestExecutingAtStartRunsAgain(t *testing.T) {
	reg := registry(t)
	data := t.TempDir()
	s := start(t, reg, data)
	_, run := newRun(t, s)
	first := loss(t, submit(t, s, run.ID, 1, "forward_backward", batch(1)))
	s.Stop(context.Background())

	markExecutingOnDisk(t, data, run.ID, 1, 1)
	s = start(t, reg, data)
	op := wait(t, s, mustOpID(t, s, run.ID, 1))
	if loss(t, op) != first || op.Attempts != 2 {
		t.Fatalf("re-run: loss %v (first %v), attempts %d", loss(t, op), first, op.Attempts)
	}
	s.Stop(context.Background())

	markExecutingOnDisk(t, data, run.ID, 1, oplog.MaxAttempts-1)
	s = start(t, reg, data)
	defer s.Stop(context.Background())
	op = wait(t, s, mustOpID(t, s, run.ID, 1))
	if op.Status != states.OpFailed || *op.ErrorCode != protocol.CodeInterrupted || !strings.Contains(*op.ErrorMessage, fmt.Sprint(oplog.MaxAttempts)) {
		t.Fatalf("third crash: %s %v %v", op.Status, op.ErrorCode, op.ErrorMessage)
	}
	if r, _ := s.GetRun(tenant, run.ID); r.Status != states.RunInterrupted {
		t.Fatalf("run %s", r.Status)
	}
}

func mustOpID(t *testing.T, s *System, run string, seq int64) string {
	t.Helper()
	p, err := s.ListOperations(tenant, run, seq-1, 1)
	if err != nil || len(p.Items) != 1 {
		t.Fatal(err, p)
	}
	return p.Items[0].ID
}

// A session's lease does not run out while its run has work queued or
// executing: its reminder renews it, and a submission past the lease is
// taken.
func TestBusyRunKeepsLease(t *testing.T) {
	var offset atomic.Int64
	s, clock := startClocked(t, &offset)
	defer s.Stop(context.Background())
	ss, run := newRun(t, s)
	var data []string
	for i := range 4096 {
		data = append(data, fmt.Sprintf(`{"model_input":{"token_ids":[%d,5,9,3,7,1,2,4,6,8,10,12,14,16,18,20]},"loss_fn_inputs":{"target_tokens":[5,9,3,7,1,2,4,6,8,10,12,14,16,18,20,22]}}`, i%60))
	}
	long := json.RawMessage(`{"data":[` + strings.Join(data, ",") + `]}`)
	acc, err := s.Submit(protocol.Submission{Tenant: tenant, Target: run.ID, SeqID: 1, IdempotencyKey: "long", RequestHash: "h", Kind: "forward", Payload: long})
	if err != nil {
		t.Fatal(err)
	}
	offset.Add(int64(time.Duration(ss.IdleTTLSeconds+60) * time.Second))
	if _, err := s.Submit(protocol.Submission{Tenant: tenant, Target: run.ID, SeqID: 2, IdempotencyKey: "next", RequestHash: "h2", Kind: "forward", Payload: batch(2)}); err != nil {
		t.Fatalf("a submission past the lease while the run is busy: %v", err)
	}
	s.n.Reminders.Due()
	got, _ := s.GetSession(tenant, ss.ID)
	if op, _ := s.GetOperation(tenant, acc.Op.ID); states.Terminal(states.OpMoves, op.Status) {
		t.Skip("the long forward ended before the reminder") // nothing was busy to prove it
	}
	if got.Status != states.SessionReady || !got.LeaseExpiresAt.After(clock()) {
		t.Fatalf("session %s, lease until %v (now %v)", got.Status, got.LeaseExpiresAt, clock())
	}
	wait(t, s, acc.Op.ID)
}

// A panic while executing an operation fails that operation alone with
// internal_error: the node, the other runs and the same run's next
// operations go on.
func TestPanicFailsOneOperation(t *testing.T) {
	executor.FaultHook = func(j *executor.Job) {
		if j.Kind == "forward" && j.SeqID == 2 {
			panic("injected fault")
		}
	}
	defer func() { executor.FaultHook = func(*executor.Job) {} }()
	s := start(t, registry(t), t.TempDir())
	defer s.Stop(context.Background())
	_, run := newRun(t, s)
	loss(t, submit(t, s, run.ID, 1, "forward_backward", batch(1)))
	bad := submit(t, s, run.ID, 2, "forward", batch(2))
	if bad.Status != states.OpFailed || *bad.ErrorCode != protocol.CodeInternal || !strings.Contains(*bad.ErrorMessage, "injected fault") {
		t.Fatalf("the panicking operation: %s %v %v", bad.Status, bad.ErrorCode, bad.ErrorMessage)
	}
	loss(t, submit(t, s, run.ID, 3, "forward", batch(3)))
	if r, _ := s.GetRun(tenant, run.ID); r.Status != states.RunRunning {
		t.Fatalf("run %s after a failed forward", r.Status)
	}
}

// A session stored when its lease was part of its record gets the lease as
// a record of its own at the next start, and keeps working.
func TestLeasesMigrated(t *testing.T) {
	reg := registry(t)
	data := t.TempDir()
	s := start(t, reg, data)
	ss, run := newRun(t, s)
	s.Stop(context.Background())

	st, err := persistence.Open(filepath.Join(data, "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	err = st.Update(func(tx persistence.Tx) error {
		var rec map[string]any
		if _, err := tx.Get(persistence.Sessions, []byte(ss.ID), &rec); err != nil {
			return err
		}
		rec["lease_epoch"], rec["lease_expires_at"], rec["idle_ttl_s"] = int64(7), until, int64(3600)
		if err := tx.Put(persistence.Sessions, []byte(ss.ID), rec); err != nil {
			return err
		}
		return tx.Delete(persistence.Leases, []byte(ss.ID))
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}

	s = start(t, reg, data)
	defer s.Stop(context.Background())
	got, err := s.GetSession(tenant, ss.ID)
	if err != nil || got.Status != states.SessionReady || !got.LeaseExpiresAt.Equal(until) || got.IdleTTLSeconds != 3600 || got.LeaseEpoch < 7 {
		t.Fatalf("the migrated session: %+v %v", got, err)
	}
	loss(t, submit(t, s, run.ID, 1, "forward_backward", batch(1)))
}
