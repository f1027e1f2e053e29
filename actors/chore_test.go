package actors

import (
	"context"
	"errors"
	"github.com/wts-project/wts/actors/protocol"
	"testing"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/payload"
)

// Work that is not an operation runs on the trainer's executor and returns
// its outcome to its caller: a failure as it is, a panic as an error (the
// executor goes on serving operations), and nothing once the node stops.
func TestChore(t *testing.T) {
	s := start(t, registry(t), t.TempDir())
	_, run := newRun(t, s)
	want := errors.New("the chore's own failure")
	ran := 0
	if err := s.n.Trainer.Chore("acme", "a", func(*executor.Trainer) error { ran++; return want }); !errors.Is(err, want) || ran != 1 {
		t.Fatalf("chore: %v, ran %d times", err, ran)
	}
	if err := s.n.Trainer.Chore("acme", "b", func(*executor.Trainer) error { panic("chore fault") }); !errors.Is(err, grain.ErrPanic) {
		t.Fatalf("a panicking chore: %v", err)
	}
	loss(t, submit(t, s, run.ID, 1, payload.ForwardBackward, batch(1)))
	s.Stop(context.Background())
	if err := s.n.Trainer.Chore("acme", "c", func(*executor.Trainer) error { return nil }); protocol.AsError(err).Code != protocol.CodeUnavailable {
		t.Fatalf("a chore after the stop: %v", err)
	}
}
