package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/wts-project/wts/actors/protocol"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
)

var tenant = persistence.Tenant{Org: "acme"}

func registry(t *testing.T) *providers.Registry {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := model.Generate("tiny", 3, dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	c, err := providers.NewCatalog(map[string]string{"tiny": dir})
	if err != nil {
		t.Fatal(err)
	}
	return providers.NewRegistry(c)
}

func start(t *testing.T, reg *providers.Registry, data string) *System {
	t.Helper()
	return startWith(t, Config{DataDir: data, Registry: reg})
}

// startWith starts a node with cfg, quiet; with WTS_WIRE=1 in the
// environment every message between its actors is msgpack-encoded, as
// between nodes (Config.Wire).
func startWith(t *testing.T, cfg Config) *System {
	t.Helper()
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Wire = os.Getenv("WTS_WIRE") == "1"
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startClocked starts a node whose clock runs offset ahead of time.Now.
func startClocked(t *testing.T, offset *atomic.Int64) (*System, func() time.Time) {
	t.Helper()
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	return startWith(t, Config{DataDir: t.TempDir(), Registry: registry(t), Now: clock}), clock
}

func batch(seed int) json.RawMessage {
	toks := make([]int, 12)
	for i := range toks {
		toks[i] = (seed*7 + i*5) % 64
	}
	return json.RawMessage(fmt.Sprintf(`{"data":[{"model_input":{"token_ids":%s},"loss_fn_inputs":{"target_tokens":%s}}],"loss_fn":"cross_entropy"}`,
		mustJSON(toks[:11]), mustJSON(toks[1:])))
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func wait(t *testing.T, s *System, id string) *persistence.Operation {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		op, err := s.GetOperation(tenant, id)
		if err != nil {
			t.Fatal(err)
		}
		if states.Terminal(states.OpMoves, op.Status) {
			return op
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("operation %s did not end", id)
	return nil
}

func submit(t *testing.T, s *System, run string, seq int64, kind string, p json.RawMessage) *persistence.Operation {
	t.Helper()
	acc, err := s.Submit(protocol.Submission{Tenant: tenant, Target: run, SeqID: seq, IdempotencyKey: fmt.Sprint("k", seq), RequestHash: fmt.Sprint("h", seq), Kind: kind, Payload: p})
	if err != nil {
		t.Fatalf("submit %s seq %d: %v", kind, seq, err)
	}
	return wait(t, s, acc.Op.ID)
}

func newRun(t *testing.T, s *System) (*protocol.Session, *persistence.Run) {
	t.Helper()
	ss, created, err := s.CreateSession(protocol.NewSession{Tenant: tenant, RequestID: "s1"})
	if err != nil || !created {
		t.Fatal(err, created)
	}
	m, _ := s.Registry().Catalog().Lookup("tiny")
	rr, err := s.CreateRun(protocol.NewRun{Tenant: tenant, SessionID: ss.ID, RequestID: "r1", BaseModel: "tiny", ModelRevision: m.Revision, TuningMode: "lora",
		LoRA: &persistence.LoRA{Rank: 4, Seed: 1, TrainAttn: true, TrainMLP: true}})
	if err != nil {
		t.Fatal(err)
	}
	return ss, &rr.Run
}

func loss(t *testing.T, op *persistence.Operation) float64 {
	t.Helper()
	if op.Status != states.OpSucceeded {
		t.Fatalf("operation %d %s: %s %v", op.SeqID, op.Kind, op.Status, op.ErrorMessage)
	}
	var r struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	if err := json.Unmarshal(op.Result, &r); err != nil {
		t.Fatal(err)
	}
	return r.Metrics["loss:sum"]
}

// A run's trainer survives a restart: the trainer rebuilt from a snapshot
// and the replayed operations gives the same losses as one that never
// stopped.
func TestTrainingSurvivesRestart(t *testing.T) {
	reg := registry(t)
	steps := func(s *System, run string, from, to int64) []float64 {
		var out []float64
		for seq := from; seq < to; seq += 2 {
			out = append(out, loss(t, submit(t, s, run, seq, "forward_backward", batch(int(seq)))))
			submit(t, s, run, seq+1, "optim_step", json.RawMessage(`{"adam_params":{"learning_rate":0.01}}`))
		}
		return out
	}
	ref := start(t, reg, t.TempDir())
	_, rr := newRun(t, ref)
	want := steps(ref, rr.ID, 1, 13)
	ref.Stop(context.Background())

	for _, every := range []time.Duration{time.Hour, time.Nanosecond} {
		data := t.TempDir()
		s := startWith(t, Config{DataDir: data, Registry: reg, SnapshotEvery: every})
		_, run := newRun(t, s)
		got := steps(s, run.ID, 1, 7)
		s.Stop(context.Background())
		s = startWith(t, Config{DataDir: data, Registry: reg, SnapshotEvery: every})
		got = append(got, steps(s, run.ID, 7, 13)...)
		r, _ := s.GetRun(tenant, run.ID)
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
	s := start(t, registry(t), t.TempDir())
	defer s.Stop(context.Background())
	_, run := newRun(t, s)
	sub := protocol.Submission{Tenant: tenant, Target: run.ID, SeqID: 2, IdempotencyKey: "a", RequestHash: "x", Kind: "forward", Payload: batch(1)}
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
		t.Fatalf("other tenant: %v", err)
	}
}

// A session whose lease runs out is timed out by its reminder, with its run;
// a heartbeat or an accepted operation pushes the lease back first.
func TestLeaseExpiry(t *testing.T) {
	var offset atomic.Int64 // how far the test has moved the clock
	s, _ := startClocked(t, &offset)
	defer s.Stop(context.Background())
	ss, run := newRun(t, s)
	ttl := time.Duration(ss.IdleTTLSeconds) * time.Second
	status := func() (string, string) {
		got, err := s.GetSession(tenant, ss.ID)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.GetRun(tenant, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Status, r.Status
	}

	loss(t, submit(t, s, run.ID, 1, "forward_backward", batch(1)))
	offset.Add(int64(ttl - 10*time.Second)) // within the lease the operation extended
	s.n.Reminders.Due()
	if st, _ := status(); st != states.SessionReady {
		t.Fatalf("session %s before its lease ended", st)
	}
	if _, err := s.Heartbeat(tenant, ss.ID); err != nil {
		t.Fatal(err)
	}
	offset.Add(int64(ttl - 10*time.Second)) // past the first lease, within the heartbeat's
	s.n.Reminders.Due()
	if st, _ := status(); st != states.SessionReady {
		t.Fatalf("session %s: the heartbeat did not extend the lease", st)
	}

	offset.Add(int64(11 * time.Second))
	sub := protocol.Submission{Tenant: tenant, Target: run.ID, SeqID: 2, IdempotencyKey: "late", RequestHash: "h", Kind: "forward", Payload: batch(2)}
	var e *protocol.Error
	if _, err := s.Submit(sub); !errors.As(err, &e) || e.Code != protocol.CodeSessionNotReady {
		t.Fatalf("submission after the lease ended: %v", err)
	}
	s.n.Reminders.Due()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, rs := status()
		if st == states.SessionTimedOut && rs == states.RunTimedOut {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the lease: session %s, run %s", st, rs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	got, _ := s.GetSession(tenant, ss.ID)
	if got.ErrorCode != protocol.CodeTimedOut {
		t.Errorf("session error_code %q", got.ErrorCode)
	}
	if _, err := s.Heartbeat(tenant, ss.ID); !errors.As(err, &e) {
		t.Errorf("heartbeat of a timed-out session: %v", err)
	}
	// The run ended, so provider_a's device time is billed: nothing pending.
	c, err := s.Cost(tenant, ss.ID)
	if err != nil || c.SettlementStatus != "settled" || c.TotalMicroUSD != c.EstimatedMaxMicroUSD || len(c.Components) != 2 {
		t.Errorf("cost after the run timed out: %+v %v", c, err)
	}
}

// The bytes a run's grain holds for its queued operations are counted while
// they are queued and given back as they end.
func TestQueuedBytesAccounted(t *testing.T) {
	s := start(t, registry(t), t.TempDir())
	defer s.Stop(context.Background())
	_, run := newRun(t, s)
	var ids []string
	peak := int64(0)
	for seq := int64(1); seq <= 8; seq++ {
		acc, err := s.Submit(protocol.Submission{Tenant: tenant, Target: run.ID, SeqID: seq, IdempotencyKey: fmt.Sprint("q", seq), RequestHash: "h", Kind: "forward_backward", Payload: batch(int(seq))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, acc.Op.ID)
		peak = max(peak, s.n.Limits.Queued().Bytes)
	}
	for _, id := range ids {
		wait(t, s, id)
	}
	if peak <= 0 {
		t.Fatal("queued operations held no bytes")
	}
	deadline := time.Now().Add(5 * time.Second)
	for q := s.n.Limits.Queued(); q.Ops != 0 || q.Bytes != 0; q = s.n.Limits.Queued() {
		if time.Now().After(deadline) {
			t.Fatalf("after every operation ended: %d queued, %d bytes", q.Ops, q.Bytes)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
