package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wts-project/wts/actors"
	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/nodetest"
	"github.com/wts-project/wts/actors/oplog"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
)

// A run's trainer survives a restart: the trainer rebuilt from a snapshot
// and the replayed operations gives the same losses as one that never
// stopped.
func TestTrainingSurvivesRestart(t *testing.T) {
	reg := nodetest.Registry(t)
	steps := func(s *actors.System, run string, from, to int64) []float64 {
		var out []float64
		for seq := from; seq < to; seq += 2 {
			out = append(out, nodetest.Loss(t, nodetest.Submit(t, s, run, seq, "forward_backward", nodetest.Batch(int(seq)))))
			nodetest.Submit(t, s, run, seq+1, "optim_step", json.RawMessage(`{"adam_params":{"learning_rate":0.01}}`))
		}
		return out
	}
	ref := nodetest.Start(t, reg, t.TempDir())
	_, rr := nodetest.NewRun(t, ref)
	want := steps(ref, rr.ID, 1, 13)
	ref.Stop(context.Background())

	for _, every := range []time.Duration{time.Hour, time.Nanosecond} {
		data := t.TempDir()
		s := nodetest.StartWith(t, actors.Config{DataDir: data, Registry: reg, SnapshotEvery: every})
		_, run := nodetest.NewRun(t, s)
		got := steps(s, run.ID, 1, 7)
		s.Stop(context.Background())
		s = nodetest.StartWith(t, actors.Config{DataDir: data, Registry: reg, SnapshotEvery: every})
		got = append(got, steps(s, run.ID, 7, 13)...)
		r, _ := s.GetRun(nodetest.Tenant, run.ID)
		if every == time.Nanosecond && r.SnapshotSeq == 0 {
			t.Errorf("no snapshot recorded")
		}
		s.Stop(context.Background())
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("snapshot every %v: step %d loss %v, uninterrupted %v", every, i, got[i], want[i])
			}
		}
	}
}

func TestSeqAndIdempotency(t *testing.T) {
	s := nodetest.Start(t, nodetest.Registry(t), t.TempDir())
	defer s.Stop(context.Background())
	_, run := nodetest.NewRun(t, s)
	sub := protocol.Submission{Tenant: nodetest.Tenant, Target: run.ID, SeqID: 2, IdempotencyKey: "a", RequestHash: "x", Kind: "forward", Payload: nodetest.Batch(1)}
	var e *protocol.Error
	if _, err := s.Submit(sub); !errors.As(err, &e) || e.Code != protocol.CodeSeqMismatch {
		t.Fatalf("seq 2 first: %v", err)
	}
	sub.SeqID = 1
	a, err := s.Submit(sub)
	if err != nil || !a.Created {
		t.Fatal(err)
	}
	b, err := s.Submit(sub)
	if err != nil || b.Created || b.Op.ID != a.Op.ID {
		t.Fatalf("repeat: %v %+v", err, b)
	}
	sub.RequestHash = "y"
	if _, err := s.Submit(sub); !errors.As(err, &e) || e.Code != protocol.CodeIdempotencyConflict {
		t.Fatalf("other hash: %v", err)
	}
	if _, err := s.GetRun(persistence.Tenant{Org: "other"}, run.ID); !errors.As(err, &e) || e.Code != protocol.CodeNotFound {
		t.Fatalf("other nodetest.Tenant: %v", err)
	}
}

// The bytes a run's grain holds for its queued operations are counted while
// they are queued and given back as they end.
func TestQueuedBytesAccounted(t *testing.T) {
	s := nodetest.Start(t, nodetest.Registry(t), t.TempDir())
	defer s.Stop(context.Background())
	_, run := nodetest.NewRun(t, s)
	var ids []string
	peak := int64(0)
	for seq := int64(1); seq <= 8; seq++ {
		acc, err := s.Submit(protocol.Submission{Tenant: nodetest.Tenant, Target: run.ID, SeqID: seq, IdempotencyKey: fmt.Sprint("q", seq), RequestHash: "h", Kind: "forward_backward", Payload: nodetest.Batch(int(seq))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, acc.Op.ID)
		peak = max(peak, s.Node().Limits.Queued().Bytes)
	}
	for _, id := range ids {
		nodetest.Wait(t, s, id)
	}
	if peak <= 0 {
		t.Fatal("queued operations held no bytes")
	}
	deadline := time.Now().Add(5 * time.Second)
	for q := s.Node().Limits.Queued(); q.Ops != 0 || q.Bytes != 0; q = s.Node().Limits.Queued() {
		if time.Now().After(deadline) {
			t.Fatalf("after every operation ended: %d queued, %d bytes", q.Ops, q.Bytes)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

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
	reg := nodetest.Registry(t)
	data := t.TempDir()
	s := nodetest.Start(t, reg, data)
	_, run := nodetest.NewRun(t, s)
	first := nodetest.Loss(t, nodetest.Submit(t, s, run.ID, 1, "forward_backward", nodetest.Batch(1)))
	s.Stop(context.Background())

	markExecutingOnDisk(t, data, run.ID, 1, 1)
	s = nodetest.Start(t, reg, data)
	op := nodetest.Wait(t, s, nodetest.OpID(t, s, run.ID, 1))
	if nodetest.Loss(t, op) != first || op.Attempts != 2 {
		t.Fatalf("re-run: loss %v (first %v), attempts %d", nodetest.Loss(t, op), first, op.Attempts)
	}
	s.Stop(context.Background())

	markExecutingOnDisk(t, data, run.ID, 1, oplog.MaxAttempts-1)
	s = nodetest.Start(t, reg, data)
	defer s.Stop(context.Background())
	op = nodetest.Wait(t, s, nodetest.OpID(t, s, run.ID, 1))
	if op.Status != states.OpFailed || *op.ErrorCode != protocol.CodeInterrupted || !strings.Contains(*op.ErrorMessage, fmt.Sprint(oplog.MaxAttempts)) {
		t.Fatalf("third crash: %s %v %v", op.Status, op.ErrorCode, op.ErrorMessage)
	}
	if r, _ := s.GetRun(nodetest.Tenant, run.ID); r.Status != states.RunInterrupted {
		t.Fatalf("run %s", r.Status)
	}
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
	s := nodetest.Start(t, nodetest.Registry(t), t.TempDir())
	defer s.Stop(context.Background())
	_, run := nodetest.NewRun(t, s)
	nodetest.Loss(t, nodetest.Submit(t, s, run.ID, 1, "forward_backward", nodetest.Batch(1)))
	bad := nodetest.Submit(t, s, run.ID, 2, "forward", nodetest.Batch(2))
	if bad.Status != states.OpFailed || *bad.ErrorCode != protocol.CodeInternal || !strings.Contains(*bad.ErrorMessage, "injected fault") {
		t.Fatalf("the panicking operation: %s %v %v", bad.Status, bad.ErrorCode, bad.ErrorMessage)
	}
	nodetest.Loss(t, nodetest.Submit(t, s, run.ID, 3, "forward", nodetest.Batch(3)))
	if r, _ := s.GetRun(nodetest.Tenant, run.ID); r.Status != states.RunRunning {
		t.Fatalf("run %s after a failed forward", r.Status)
	}
}

// fencedCount reads the node's wts_executor_fenced_total for executor.
func fencedCount(t *testing.T, s *actors.System, executor string) float64 {
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
	s := nodetest.Start(t, nodetest.Registry(t), t.TempDir())
	defer s.Stop(context.Background())
	_, run := nodetest.NewRun(t, s)
	nodetest.Submit(t, s, run.ID, 1, payload.ForwardBackward, nodetest.Batch(1))
	var h persistence.Head
	if err := s.Node().Store.View(func(tx persistence.Tx) error {
		_, err := tx.Get(persistence.Heads, []byte(run.ID), &h)
		return err
	}); err != nil || h.Epoch < 1 {
		t.Fatal(err, h)
	}

	var mu sync.Mutex
	var ran []*executor.Job
	executor.FaultHook = func(j *executor.Job) { mu.Lock(); ran = append(ran, j); mu.Unlock() }
	defer func() { executor.FaultHook = func(*executor.Job) {} }()
	stale := &executor.Job{RunID: run.ID, Tenant: nodetest.Tenant, Epoch: h.Epoch - 1, OpID: "wto_stale", SeqID: 1000, Kind: payload.Forward,
		Payload: nodetest.Batch(2), BaseModel: run.BaseModel, LoRA: run.LoRA, StateSeq: 1}
	s.Node().ExecJob(stale)
	s.Node().ExecCancel(executor.JobRef{RunID: run.ID, SeqID: 2, Epoch: h.Epoch - 1})
	if op := nodetest.Submit(t, s, run.ID, 2, payload.Forward, nodetest.Batch(3)); op.Status != states.OpSucceeded {
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

// A run-scoped sample cut short on its sampler's node while the run's node
// goes on (the sampler's node stopping, in a cluster) stays executing: the
// run does not put it back behind a sampler that still reports it, and a
// wake-up (sent when that node has left) hands it again at most once more.
func TestHandedSampleCutElsewhere(t *testing.T) {
	s := nodetest.Start(t, nodetest.RegistryOf(t, "tiny-llama3", nil), t.TempDir()) // a context of 512: a long sample
	defer s.Stop(context.Background())
	_, run := nodetest.NewRun(t, s)
	nodetest.Submit(t, s, run.ID, 1, payload.SaveWeightsForSampler, json.RawMessage(`{}`))
	long := json.RawMessage(`{"prompt":{"token_ids":[1,2,3]},"parameters":{"max_tokens":500,"temperature":1,"top_p":1,"top_k":-1,"seed":7},"num_samples":64}`)
	acc, err := s.Submit(protocol.Submission{Tenant: nodetest.Tenant, Target: run.ID, SeqID: 2, IdempotencyKey: "k2", RequestHash: "h", Kind: payload.Sample, Payload: long})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Past the trainer's part: on the sampler, which reports its progress.
	for deadline := start.Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		op, err := s.GetOperation(nodetest.Tenant, acc.Op.ID)
		if err != nil || states.Terminal(states.OpMoves, op.Status) || time.Now().After(deadline) {
			t.Fatalf("the sample ended, or never decoded, before it was cut (%v): make it longer", err)
		}
		if op.Progress != nil {
			break
		}
	}
	var head persistence.Head
	if err := s.Store().View(func(tx persistence.Tx) error {
		_, err := tx.Get(persistence.Heads, []byte(run.ID), &head)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	n := s.Node()
	n.Run(run.ID).ExecDone(&executor.Done{Epoch: head.Epoch, SeqID: 2, Status: states.OpPending, Message: "cut short by the node's stop"})
	if err := n.Run(run.ID).Wake(); err != nil {
		t.Fatal(err)
	}
	op := nodetest.Wait(t, s, acc.Op.ID)
	t.Logf("sample took %v", time.Since(start))
	if op.Status != states.OpSucceeded || op.Attempts != 0 {
		t.Fatalf("the handed sample: %s attempts %d %v", op.Status, op.Attempts, op.ErrorMessage)
	}
	if got := nodetest.Submit(t, s, run.ID, 3, payload.Sample, long); got.Status != states.OpSucceeded {
		t.Fatalf("the next operation: %s %v", got.Status, got.ErrorMessage)
	}
}

// An activation that a newer one replaced (two members briefly disagreeing
// about the run's placement) does not answer from its stale memory: a
// seq_id it would refuse is checked against the store first, the caller
// is told to try again (unavailable), and the activation leaves, so that
// the next call finds the run as the store has it.
func TestStaleActivationLeaves(t *testing.T) {
	s := nodetest.Start(t, nodetest.Registry(t), t.TempDir())
	defer s.Stop(context.Background())
	_, run := nodetest.NewRun(t, s)
	nodetest.Submit(t, s, run.ID, 1, payload.Forward, nodetest.Batch(1))
	err := s.Store().Update(func(tx persistence.Tx) error { // a newer activation elsewhere took the lease and admitted seq 2
		var h persistence.Head
		if _, err := tx.Get(persistence.Heads, []byte(run.ID), &h); err != nil {
			return err
		}
		h.Epoch++
		h.NextSeqID = 3
		return tx.Put(persistence.Heads, []byte(run.ID), &h)
	})
	if err != nil {
		t.Fatal(err)
	}
	sub := protocol.Submission{Tenant: nodetest.Tenant, Target: run.ID, SeqID: 3, IdempotencyKey: "k3", RequestHash: "h", Kind: payload.Forward, Payload: nodetest.Batch(3)}
	var e *protocol.Error
	if _, err := s.Submit(sub); !errors.As(err, &e) || e.Code != protocol.CodeUnavailable {
		t.Fatalf("seq 3 to the stale activation (next_seq_id 2 in its memory): %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		acc, err := s.Submit(sub)
		if err == nil {
			if !acc.Created || acc.Op.SeqID != 3 {
				t.Fatalf("seq 3 after the stale activation left: %+v", acc)
			}
			break
		}
		if !errors.As(err, &e) || e.Code != protocol.CodeUnavailable || time.Now().After(deadline) {
			t.Fatalf("seq 3 after the stale activation left: %v", err)
		}
	}
}

// counter reads one of the node's counters without labels.
func counter(t *testing.T, s *actors.System, name string) float64 {
	t.Helper()
	fams, err := s.Telemetry().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// Pooled runs' forwards waiting at once on one base model run in one pass
// through it, and each gets what it gets in a pass of its own: the same
// loss, bit for bit, as the same forward run alone.
func TestPooledRunsSharePasses(t *testing.T) {
	s := nodetest.Start(t, nodetest.Registry(t), t.TempDir())
	defer s.Stop(context.Background())
	nodetest.Credit(t, s)
	const n = 4
	runs := make([]*persistence.Run, n)
	alone := make([]float64, n)
	for i := range runs {
		var ss *protocol.Session
		ss, runs[i] = nodetest.NamedRun(t, s, fmt.Sprint(i), "provider_b", uint64(i+1))
		if ss.Provider != "provider_b" {
			t.Fatalf("session on %s, want the shared pool", ss.Provider)
		}
		// A step, so that the adapters differ, then a forward alone.
		nodetest.Loss(t, nodetest.Submit(t, s, runs[i].ID, 1, payload.ForwardBackward, nodetest.Batch(i)))
		nodetest.Submit(t, s, runs[i].ID, 2, payload.OptimStep, json.RawMessage(`{"adam_params":{"learning_rate":0.05}}`))
		alone[i] = nodetest.Loss(t, nodetest.Submit(t, s, runs[i].ID, 3, payload.Forward, nodetest.Batch(10+i)))
	}

	// The first forward to start holds the executor until the others wait
	// in line behind it.
	release := make(chan struct{})
	var once sync.Once
	executor.FaultHook = func(j *executor.Job) {
		if j.SeqID == 4 {
			once.Do(func() { <-release })
		}
	}
	defer func() { executor.FaultHook = func(*executor.Job) {} }()
	passes, carried := counter(t, s, "wts_trainer_passes_total"), counter(t, s, "wts_trainer_pass_runs_total")
	ids := make([]string, n)
	for i, r := range runs {
		acc, err := s.Submit(protocol.Submission{Tenant: nodetest.Tenant, Target: r.ID, SeqID: 4, IdempotencyKey: "k4", RequestHash: "h4", Kind: payload.Forward, Payload: nodetest.Batch(10 + i)})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = acc.Op.ID
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Node().Trainer.Waiting() < n-1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d forwards waiting, want %d", s.Node().Trainer.Waiting(), n-1)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	for i, id := range ids {
		if got := nodetest.Loss(t, nodetest.Wait(t, s, id)); math.Float64bits(got) != math.Float64bits(alone[i]) {
			t.Fatalf("run %d: loss %v in the shared pass, %v alone", i, got, alone[i])
		}
	}
	if p, c := counter(t, s, "wts_trainer_passes_total")-passes, counter(t, s, "wts_trainer_pass_runs_total")-carried; p != 1 || c != n {
		t.Fatalf("%v passes carried %v runs' forwards, want one pass of %d", p, c, n)
	}
}
