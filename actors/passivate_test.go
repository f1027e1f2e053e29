package actors

import (
	"context"
	"errors"
	"github.com/wts-project/wts/actors/protocol"
	"testing"
	"time"

	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
)

// active is the number of activations of grain kind on the node.
func active(s *System, kind string) int32 { return s.cluster.GetClusterKind(kind).Count() }

// awaitPassivated waits until no grain of the kinds is in memory.
func awaitPassivated(t *testing.T, s *System, kinds ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range kinds {
		for active(s, k) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d %s grains still in memory", active(s, k), k)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// Idle grains leave memory and come back from the store: a run's next
// operation continues its sequence on the trainer state the first left, an
// idempotent repeat finds the original, and a session's lease reminder
// reaches its passivated grain.
func TestGrainsPassivate(t *testing.T) {
	s := startWith(t, Config{DataDir: t.TempDir(), Registry: registry(t), GrainIdle: 50 * time.Millisecond})
	defer s.Stop(context.Background())
	ss, run := newRun(t, s)
	first := loss(t, submit(t, s, run.ID, 1, payload.ForwardBackward, batch(1)))
	awaitPassivated(t, s, protocol.SessionKind, protocol.RunKind)

	again, err := s.Submit(protocol.Submission{Tenant: tenant, Target: run.ID, SeqID: 1, IdempotencyKey: "k1", RequestHash: "h1", Kind: payload.ForwardBackward, Payload: batch(1)})
	if err != nil || again.Created || loss(t, wait(t, s, again.Op.ID)) != first {
		t.Fatalf("the repeat after passivation: %+v %v", again, err)
	}
	loss(t, submit(t, s, run.ID, 2, payload.OptimStep, nil))
	loss(t, submit(t, s, run.ID, 3, payload.Forward, batch(1)))
	if r, _ := s.GetRun(tenant, run.ID); r.NextSeqID != 4 {
		t.Fatalf("next_seq_id %d after reactivation", r.NextSeqID)
	}
	awaitPassivated(t, s, protocol.SessionKind, protocol.RunKind)

	before, _ := s.GetSession(tenant, ss.ID)
	s.remind(protocol.ReminderKey(protocol.SessionKind, ss.ID)) // the lease's reminder, early: it re-arms
	after, err := s.GetSession(tenant, ss.ID)
	if err != nil || after.Status != states.SessionReady || after.LeaseEpoch != before.LeaseEpoch+1 {
		t.Fatalf("the reminder did not reactivate the session: %+v -> %+v (%v)", before, after, err)
	}
	if _, err := s.CloseSession(tenant, ss.ID); err != nil {
		t.Fatal(err)
	}
}

// An activation that fails is not kept: the next call activates the grain
// again, and succeeds once the cause is gone.
func TestFailedActivationRetried(t *testing.T) {
	s := start(t, registry(t), t.TempDir())
	defer s.Stop(context.Background())
	id := protocol.NewID(protocol.RunPrefix)
	var e *protocol.Error
	if err := s.n.Router.Call(protocol.RunKind, id, "run.wake", struct{}{}, nil); !errors.As(err, &e) || e.Code != protocol.CodeNotFound {
		t.Fatalf("waking a run with no record: %v", err)
	}
	_, run := newRun(t, s)
	r := *run
	r.ID = id
	if err := s.n.Store.Update(func(tx persistence.Tx) error { return persistence.CreateRun(tx, &r) }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.n.Router.Call(protocol.RunKind, id, "run.wake", struct{}{}, nil)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's activation failure stuck: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
