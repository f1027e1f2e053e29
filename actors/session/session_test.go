package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wts-project/wts/actors"
	"github.com/wts-project/wts/actors/limits"
	"github.com/wts-project/wts/actors/nodetest"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/actors/usage"
	"github.com/wts-project/wts/persistence"
)

// A session whose lease runs out is timed out by its reminder, with its run;
// a heartbeat or an accepted operation pushes the lease back first.
func TestLeaseExpiry(t *testing.T) {
	var offset atomic.Int64 // how far the test has moved the clock
	s, clock := nodetest.StartClocked(t, &offset)
	defer s.Stop(context.Background())
	ss, run := nodetest.NewRun(t, s)
	ttl := time.Duration(ss.IdleTTLSeconds) * time.Second
	status := func() (string, string) {
		got, err := s.GetSession(nodetest.Tenant, ss.ID)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.GetRun(nodetest.Tenant, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Status, r.Status
	}

	nodetest.Loss(t, nodetest.Submit(t, s, run.ID, 1, "forward_backward", nodetest.Batch(1)))
	offset.Add(int64(ttl - 10*time.Second)) // within the lease the operation extended
	s.Node().Reminders.Due()
	if st, _ := status(); st != states.SessionReady {
		t.Fatalf("session %s before its lease ended", st)
	}
	if _, err := s.Heartbeat(nodetest.Tenant, ss.ID); err != nil {
		t.Fatal(err)
	}
	offset.Add(int64(ttl - 10*time.Second)) // past the first lease, within the heartbeat's
	s.Node().Reminders.Due()
	if st, _ := status(); st != states.SessionReady {
		t.Fatalf("session %s: the heartbeat did not extend the lease", st)
	}

	offset.Add(int64(11 * time.Second))
	sub := protocol.Submission{Tenant: nodetest.Tenant, Target: run.ID, SeqID: 2, IdempotencyKey: "late", RequestHash: "h", Kind: "forward", Payload: nodetest.Batch(2)}
	var e *protocol.Error
	if _, err := s.Submit(sub); !errors.As(err, &e) || e.Code != protocol.CodeSessionNotReady {
		t.Fatalf("submission after the lease ended: %v", err)
	}
	s.Node().Reminders.Due()
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
	got, _ := s.GetSession(nodetest.Tenant, ss.ID)
	if got.ErrorCode != protocol.CodeTimedOut {
		t.Errorf("session error_code %q", got.ErrorCode)
	}
	if _, err := s.Heartbeat(nodetest.Tenant, ss.ID); !errors.As(err, &e) {
		t.Errorf("heartbeat of a timed-out session: %v", err)
	}
	// provider_a's device time settles by the settlement pass, its delay
	// (10 minutes) long past on the test's clock.
	if n, err := usage.SettleDue(s.Store(), clock()); n != 1 || err != nil {
		t.Fatalf("settled %d operations: %v", n, err)
	}
	c, err := s.Cost(nodetest.Tenant, ss.ID)
	if err != nil || c.SettlementStatus != "settled" || c.TotalMicroUSD != c.EstimatedMaxMicroUSD || len(c.Components) != 1 {
		t.Errorf("cost after the run timed out: %+v %v", c, err)
	}
}

// A session's lease does not run out while its run has work queued or
// executing: its reminder renews it, and a submission past the lease is
// taken.
func TestBusyRunKeepsLease(t *testing.T) {
	var offset atomic.Int64
	s, clock := nodetest.StartClocked(t, &offset)
	defer s.Stop(context.Background())
	ss, run := nodetest.NewRun(t, s)
	var data []string
	for i := range 4096 {
		data = append(data, fmt.Sprintf(`{"model_input":{"token_ids":[%d,5,9,3,7,1,2,4,6,8,10,12,14,16,18,20]},"loss_fn_inputs":{"target_tokens":[5,9,3,7,1,2,4,6,8,10,12,14,16,18,20,22]}}`, i%60))
	}
	long := json.RawMessage(`{"data":[` + strings.Join(data, ",") + `]}`)
	acc, err := s.Submit(protocol.Submission{Tenant: nodetest.Tenant, Target: run.ID, SeqID: 1, IdempotencyKey: "long", RequestHash: "h", Kind: "forward", Payload: long})
	if err != nil {
		t.Fatal(err)
	}
	offset.Add(int64(time.Duration(ss.IdleTTLSeconds+60) * time.Second))
	if _, err := s.Submit(protocol.Submission{Tenant: nodetest.Tenant, Target: run.ID, SeqID: 2, IdempotencyKey: "next", RequestHash: "h2", Kind: "forward", Payload: nodetest.Batch(2)}); err != nil {
		t.Fatalf("a submission past the lease while the run is busy: %v", err)
	}
	s.Node().Reminders.Due()
	got, _ := s.GetSession(nodetest.Tenant, ss.ID)
	if op, _ := s.GetOperation(nodetest.Tenant, acc.Op.ID); states.Terminal(states.OpMoves, op.Status) {
		t.Skip("the long forward ended before the reminder") // nothing was busy to prove it
	}
	if got.Status != states.SessionReady || !got.LeaseExpiresAt.After(clock()) {
		t.Fatalf("session %s, lease until %v (now %v)", got.Status, got.LeaseExpiresAt, clock())
	}
	nodetest.Wait(t, s, acc.Op.ID)
}

// A session is created once per request_id, within its organization's
// live-session limit; it owns one run, made under its capability row's
// rules; closing it ends the run and then the session, and frees its place.
func TestCreateOnceAndClose(t *testing.T) {
	reg := nodetest.Registry(t)
	s := nodetest.StartWith(t, actors.Config{DataDir: t.TempDir(), Registry: reg, Limits: limits.Limits{
		RunQueue: 10, OrgQueue: 10, NodeQueue: 10, QueueBytes: 1 << 20, OrgSessions: 1, OrgRuns: 1}})
	defer s.Stop(context.Background())
	ss, run := nodetest.NewRun(t, s)
	again, created, err := s.CreateSession(protocol.NewSession{Tenant: nodetest.Tenant, RequestID: "s1"})
	if err != nil || created || again.ID != ss.ID {
		t.Fatalf("the same request_id again: %+v %v %v", again, created, err)
	}
	if _, _, err := s.CreateSession(protocol.NewSession{Tenant: nodetest.Tenant, RequestID: "s2"}); protocol.AsError(err).Code != protocol.CodeLimitExceeded {
		t.Fatalf("a second live session past the limit: %v", err)
	}
	m, _ := reg.Catalog().Lookup("tiny")
	req := protocol.NewRun{Tenant: nodetest.Tenant, SessionID: ss.ID, RequestID: "r1", BaseModel: "tiny", ModelRevision: m.Revision, TuningMode: "lora",
		LoRA: &persistence.LoRA{Rank: 4, Seed: 1, TrainAttn: true, TrainMLP: true}}
	if rr, err := s.CreateRun(req); err != nil || rr.Created || rr.Run.ID != run.ID {
		t.Fatalf("the run's request again: %+v %v", rr, err)
	}
	req.RequestID = "r2"
	if _, err := s.CreateRun(req); protocol.AsError(err).Code != protocol.CodeRunExists {
		t.Fatalf("a second run: %v", err)
	}

	closed, err := s.CloseSession(nodetest.Tenant, ss.ID)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for closed.Status != states.SessionClosed {
		if time.Now().After(deadline) {
			t.Fatalf("session %s after close", closed.Status)
		}
		time.Sleep(5 * time.Millisecond)
		if closed, err = s.GetSession(nodetest.Tenant, ss.ID); err != nil {
			t.Fatal(err)
		}
	}
	if r, _ := s.GetRun(nodetest.Tenant, run.ID); r.Status != states.RunCancelled {
		t.Fatalf("run %s after its session closed", r.Status)
	}
	if _, created, err := s.CreateSession(protocol.NewSession{Tenant: nodetest.Tenant, RequestID: "s2"}); err != nil || !created {
		t.Fatalf("a session once the first closed: %v", err)
	}
}

// provider_a sessions each hold a dedicated trainer of the node's: past
// its count, naming provider_a is refused and auto routing takes
// provider_b; a session that ends, or whose run ends, frees its trainer.
func TestDedicatedTrainers(t *testing.T) {
	reg := nodetest.Registry(t)
	s := nodetest.StartWith(t, actors.Config{DataDir: t.TempDir(), Registry: reg, DedicatedTrainers: 2})
	defer s.Stop(context.Background())
	nodetest.Credit(t, s)
	create := func(id, provider string) (*protocol.Session, error) {
		ss, _, err := s.CreateSession(protocol.NewSession{Tenant: nodetest.Tenant, RequestID: id, Provider: provider})
		return ss, err
	}
	first, err := create("a1", "provider_a")
	if err != nil {
		t.Fatal(err)
	}
	second, err := create("a2", "auto")
	if err != nil || second.Provider != "provider_a" {
		t.Fatalf("auto with a trainer free: %+v %v", second, err)
	}
	if _, err := create("a3", "provider_a"); protocol.AsError(err).Code != protocol.CodeProviderFull {
		t.Fatalf("a third provider_a session on two trainers: %v", err)
	}
	if b, err := create("b1", "auto"); err != nil || b.Provider != "provider_b" {
		t.Fatalf("auto with provider_a full: %+v %v", b, err)
	}
	// Session a1's run finishes: its trainer is free again.
	m, _ := reg.Catalog().Lookup("tiny")
	rr, err := s.CreateRun(protocol.NewRun{Tenant: nodetest.Tenant, SessionID: first.ID, RequestID: "r", BaseModel: "tiny", ModelRevision: m.Revision,
		TuningMode: "lora", LoRA: &persistence.LoRA{Rank: 4, Seed: 1, TrainAttn: true}})
	if err != nil {
		t.Fatal(err)
	}
	fin, err := s.Finish(nodetest.Tenant, rr.Run.ID, "f")
	if err != nil {
		t.Fatal(err)
	}
	nodetest.Wait(t, s, fin.Op.ID)
	if a, err := create("a3", "provider_a"); err != nil || a.Provider != "provider_a" {
		t.Fatalf("provider_a once a run finished: %+v %v", a, err)
	}
	if _, err := create("a4", "provider_a"); protocol.AsError(err).Code != protocol.CodeProviderFull {
		t.Fatalf("provider_a full again: %v", err)
	}
	// Closing a session frees its trainer too.
	if _, err := s.CloseSession(nodetest.Tenant, first.ID); err != nil { // its run ended: it holds none now
		t.Fatal(err)
	}
	if _, err := create("a4", "provider_a"); protocol.AsError(err).Code != protocol.CodeProviderFull {
		t.Fatalf("closing a session whose run had freed its trainer freed another: %v", err)
	}
	if _, err := s.CloseSession(nodetest.Tenant, second.ID); err != nil {
		t.Fatal(err)
	}
	if a, err := create("a4", "provider_a"); err != nil || a.Provider != "provider_a" {
		t.Fatalf("provider_a once a session closed: %+v %v", a, err)
	}
}

// A provider the operator turned off (`wts serve --offer provider_a=`) is
// skipped by auto routing and refused when named; one that does not offer
// the model refuses the run, not the session.
func TestOffers(t *testing.T) {
	reg := nodetest.RegistryOf(t, "tiny", map[string][]string{"provider_a": {}})
	s := nodetest.StartWith(t, actors.Config{DataDir: t.TempDir(), Registry: reg})
	defer s.Stop(context.Background())
	nodetest.Credit(t, s)
	if _, _, err := s.CreateSession(protocol.NewSession{Tenant: nodetest.Tenant, RequestID: "a", Provider: "provider_a"}); protocol.AsError(err).Code != protocol.CodeProviderUnavailable {
		t.Fatalf("naming a provider turned off: %v", err)
	}
	ss, _, err := s.CreateSession(protocol.NewSession{Tenant: nodetest.Tenant, RequestID: "auto", Preferences: []string{"provider_a"}})
	if err != nil || ss.Provider != "provider_b" {
		t.Fatalf("auto preferring a provider turned off: %+v %v", ss, err)
	}
	offers, err := s.Offers()
	if err != nil || len(offers) != 1 || offers[0].Row.Provider != "provider_b" {
		t.Fatalf("capabilities list a provider turned off: %+v %v", offers, err)
	}
	_, err = s.CreateRun(protocol.NewRun{Tenant: nodetest.Tenant, SessionID: ss.ID, RequestID: "r", BaseModel: "other", ModelRevision: "0000000",
		TuningMode: "lora", LoRA: &persistence.LoRA{Rank: 4, Seed: 1, TrainAttn: true}})
	if protocol.AsError(err).Code != protocol.CodeModelUnavailable {
		t.Fatalf("a run on a model its provider does not offer: %v", err)
	}
}
