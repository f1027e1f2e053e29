package actors_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/wts-project/wts/actors"
	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/nodetest"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
)

// awaitPassivated waits until no grain of the kinds is in memory.
func awaitPassivated(t *testing.T, s *actors.System, kinds ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range kinds {
		for s.Grains()[k] > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d %s grains still in memory", s.Grains()[k], k)
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
	s := nodetest.StartWith(t, actors.Config{DataDir: t.TempDir(), Registry: nodetest.Registry(t), GrainIdle: 50 * time.Millisecond})
	defer s.Stop(context.Background())
	ss, run := nodetest.NewRun(t, s)
	first := nodetest.Loss(t, nodetest.Submit(t, s, run.ID, 1, payload.ForwardBackward, nodetest.Batch(1)))
	awaitPassivated(t, s, protocol.SessionKind, protocol.RunKind)

	again, err := s.Submit(protocol.Submission{Tenant: nodetest.Tenant, Target: run.ID, SeqID: 1, IdempotencyKey: "k1", RequestHash: "h1", Kind: payload.ForwardBackward, Payload: nodetest.Batch(1)})
	if err != nil || again.Created || nodetest.Loss(t, nodetest.Wait(t, s, again.Op.ID)) != first {
		t.Fatalf("the repeat after passivation: %+v %v", again, err)
	}
	nodetest.Loss(t, nodetest.Submit(t, s, run.ID, 2, payload.OptimStep, nil))
	nodetest.Loss(t, nodetest.Submit(t, s, run.ID, 3, payload.Forward, nodetest.Batch(1)))
	if r, _ := s.GetRun(nodetest.Tenant, run.ID); r.NextSeqID != 4 {
		t.Fatalf("next_seq_id %d after reactivation", r.NextSeqID)
	}
	awaitPassivated(t, s, protocol.SessionKind, protocol.RunKind)

	before, _ := s.GetSession(nodetest.Tenant, ss.ID)
	s.Node().Remind(protocol.SessionKind, ss.ID) // the lease's reminder, early: it re-arms
	after, err := s.GetSession(nodetest.Tenant, ss.ID)
	if err != nil || after.Status != states.SessionReady || after.LeaseEpoch != before.LeaseEpoch+1 {
		t.Fatalf("the reminder did not reactivate the session: %+v -> %+v (%v)", before, after, err)
	}
	if _, err := s.CloseSession(nodetest.Tenant, ss.ID); err != nil {
		t.Fatal(err)
	}
}

// An activation that fails is not kept: the next call activates the grain
// again, and succeeds once the cause is gone.
func TestFailedActivationRetried(t *testing.T) {
	s := nodetest.Start(t, nodetest.Registry(t), t.TempDir())
	defer s.Stop(context.Background())
	id := protocol.NewID(protocol.RunPrefix)
	var e *protocol.Error
	if err := s.Node().Router.Call(protocol.RunKind, id, "run.wake", struct{}{}, nil); !errors.As(err, &e) || e.Code != protocol.CodeNotFound {
		t.Fatalf("waking a run with no record: %v", err)
	}
	_, run := nodetest.NewRun(t, s)
	r := *run
	r.ID = id
	if err := s.Node().Store.Update(func(tx persistence.Tx) error { return persistence.CreateRun(tx, &r) }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.Node().Router.Call(protocol.RunKind, id, "run.wake", struct{}{}, nil)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's activation failure stuck: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A session stored when its lease was part of its record gets the lease as
// a record of its own at the next start, and keeps working.
func TestLeasesMigrated(t *testing.T) {
	reg := nodetest.Registry(t)
	data := t.TempDir()
	s := nodetest.Start(t, reg, data)
	ss, run := nodetest.NewRun(t, s)
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

	s = nodetest.Start(t, reg, data)
	defer s.Stop(context.Background())
	got, err := s.GetSession(nodetest.Tenant, ss.ID)
	if err != nil || got.Status != states.SessionReady || !got.LeaseExpiresAt.Equal(until) || got.IdleTTLSeconds != 3600 || got.LeaseEpoch < 7 {
		t.Fatalf("the migrated session: %+v %v", got, err)
	}
	nodetest.Loss(t, nodetest.Submit(t, s, run.ID, 1, "forward_backward", nodetest.Batch(1)))
}

// Work that is not an operation runs on the trainer's executor and returns
// its outcome to its caller: a failure as it is, a panic as an error (the
// executor goes on serving operations), and nothing once the node stops.
func TestChore(t *testing.T) {
	s := nodetest.Start(t, nodetest.Registry(t), t.TempDir())
	_, run := nodetest.NewRun(t, s)
	want := errors.New("the chore's own failure")
	ran := 0
	if err := s.Node().Trainer.Chore("acme", "a", func(*executor.Trainer) error { ran++; return want }); !errors.Is(err, want) || ran != 1 {
		t.Fatalf("chore: %v, ran %d times", err, ran)
	}
	if err := s.Node().Trainer.Chore("acme", "b", func(*executor.Trainer) error { panic("chore fault") }); !errors.Is(err, grain.ErrPanic) {
		t.Fatalf("a panicking chore: %v", err)
	}
	nodetest.Loss(t, nodetest.Submit(t, s, run.ID, 1, payload.ForwardBackward, nodetest.Batch(1)))
	s.Stop(context.Background())
	if err := s.Node().Trainer.Chore("acme", "c", func(*executor.Trainer) error { return nil }); protocol.AsError(err).Code != protocol.CodeUnavailable {
		t.Fatalf("a chore after the stop: %v", err)
	}
}
