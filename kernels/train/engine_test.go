package train

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/wts-project/wts/kernels/optim"
	"github.com/wts-project/wts/kernels/rng"
)

// The CPU engine's learners are its Trainers: the same outputs and steps
// as a trainer of their own, through a whole batch, a shared pass of two
// learners' batches, a saved and restored state; a batch of another
// engine is refused with an error.
func TestCPUEngine(t *testing.T) {
	ref := newTrainer(t, "tiny", 4)
	e := OnCPU(ref.Model())
	a, b := e.NewLearner(ref.Adapter().Clone()), e.NewLearner(ref.Adapter().Clone())
	r := rng.New(4)
	V := ref.Model().Cfg().Vocab
	d1, d2 := ceBatch(r, 2, 9, V), ceBatch(r, 3, 5, V)
	ctx := context.Background()
	want1, err := ref.ForwardBackward(ctx, d1, "cross_entropy", nil)
	if err != nil {
		t.Fatal(err)
	}
	got1, err := a.ForwardBackward(ctx, d1, "cross_entropy", nil)
	if err != nil || !reflect.DeepEqual(got1, want1) {
		t.Fatalf("a learner's forward_backward: %v, %v; its trainer's %v", got1, err, want1)
	}
	want2, err := NewTrainer(ref.Model(), ref.Adapter().Clone()).Forward(ctx, d2, "cross_entropy", nil)
	if err != nil {
		t.Fatal(err)
	}
	ba, err1 := a.Begin(d1, "cross_entropy", nil, false)
	bb, err2 := b.Begin(d2, "cross_entropy", nil, false)
	if err1 != nil || err2 != nil || !ba.Shares(bb) {
		t.Fatalf("begin %v %v, shares %v", err1, err2, ba.Shares(bb))
	}
	for !ba.Done() || !bb.Done() {
		if err := e.NextShared([]context.Context{ctx, ctx}, []Batch{ba, bb}); err != nil {
			t.Fatal(err)
		}
	}
	if got2, err := bb.Output(); err != nil || !reflect.DeepEqual(got2, want2) {
		t.Fatalf("a shared pass's batch: %v, %v; alone %v", got2, err, want2)
	}
	p := optim.Defaults()
	if _, err := ref.OptimStep(p); err != nil {
		t.Fatal(err)
	}
	if _, err := a.OptimStep(p); err != nil {
		t.Fatal(err)
	}
	paramsEqual(t, a.Adapter(), ref.Adapter(), 0)
	dir := t.TempDir()
	if err := a.SaveState(dir, "tiny"); err != nil {
		t.Fatal(err)
	}
	back, err := e.LoadLearner(dir)
	if err != nil || back.Steps() != 1 || back.PendingGradients() != 0 {
		t.Fatalf("restored: %v", err)
	}
	paramsEqual(t, back.Adapter(), a.Adapter(), 0)
	other := OnCPU(newTrainer(t, "tiny", 4).Model())
	bc, _ := b.Begin(d2, "cross_entropy", nil, false)
	if err := other.NextShared([]context.Context{ctx}, []Batch{bc}); !errors.Is(err, errForeign) {
		t.Fatalf("another engine's batch: %v", err)
	}
}
