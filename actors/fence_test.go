package actors

import (
	"context"
	"sync"
	"testing"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
)

// fencedCount reads the node's wts_executor_fenced_total for executor.
func fencedCount(t *testing.T, s *System, executor string) float64 {
	t.Helper()
	fams, err := s.Telemetry().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "wts_executor_fenced_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "executor" && l.GetValue() == executor {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// The trainer's executor refuses a job from an activation older than the
// run's current one: a replaced activation cannot run work on a trainer
// state it no longer holds. The run's own work goes on.
func TestExecutorRefusesStaleEpoch(t *testing.T) {
	s := start(t, registry(t), t.TempDir())
	defer s.Stop(context.Background())
	_, run := newRun(t, s)
	submit(t, s, run.ID, 1, payload.ForwardBackward, batch(1))
	var h persistence.Head
	if err := s.n.Store.View(func(tx persistence.Tx) error {
		_, err := tx.Get(persistence.Heads, []byte(run.ID), &h)
		return err
	}); err != nil || h.Epoch < 1 {
		t.Fatal(err, h)
	}

	var mu sync.Mutex
	var ran []*executor.Job
	executor.FaultHook = func(j *executor.Job) { mu.Lock(); ran = append(ran, j); mu.Unlock() }
	defer func() { executor.FaultHook = func(*executor.Job) {} }()
	stale := &executor.Job{RunID: run.ID, Tenant: tenant, Epoch: h.Epoch - 1, OpID: "wto_stale", SeqID: 1000, Kind: payload.Forward,
		Payload: batch(2), BaseModel: run.BaseModel, LoRA: run.LoRA, StateSeq: 1}
	s.n.ExecJob(stale)
	s.n.ExecCancel(executor.JobRef{RunID: run.ID, SeqID: 2, Epoch: h.Epoch - 1})
	if op := submit(t, s, run.ID, 2, payload.Forward, batch(3)); op.Status != states.OpSucceeded {
		t.Fatalf("the run's own operation: %s %v", op.Status, op.ErrorMessage)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, j := range ran {
		if j.SeqID == stale.SeqID {
			t.Fatal("the stale job ran")
		}
	}
	if n := fencedCount(t, s, "trainer"); n != 2 {
		t.Fatalf("fenced %v commands, want 2 (the job and the cancel)", n)
	}
}
