package executor

import (
	"errors"
	"slices"
	"testing"

	"github.com/wts-project/wts/actors/payload"
)

// TestKindTable holds the table to what the API and the executors need:
// each endpoint's kinds in the documented order, an engine entry and a
// parser for every kind that may be submitted, and an unknown kind refused.
func TestKindTable(t *testing.T) {
	wantRun := []string{payload.Forward, payload.ForwardBackward, payload.Sample, payload.OptimStep, payload.SaveState,
		payload.LoadState, payload.SaveWeightsForSampler, payload.ExportLoRA}
	if got := RunKinds(); !slices.Equal(got, wantRun) {
		t.Errorf("run kinds %v, want %v", got, wantRun)
	}
	if got := SamplerKinds(); !slices.Equal(got, []string{payload.Sample, payload.Logprobs}) {
		t.Errorf("sampler kinds %v", got)
	}
	for _, k := range kindTable {
		switch {
		case k.Scope != 0 && k.Parse == nil:
			t.Errorf("%s may be submitted but has no parser", k.Name)
		case k.Scope&OnRun != 0 && k.train == nil:
			t.Errorf("%s is taken by runs but has no trainer entry", k.Name)
		case k.Scope&OnSampler != 0 && k.sample == nil:
			t.Errorf("%s is taken by samplers but has no sampling entry", k.Name)
		case k.Mutates && k.train == nil:
			t.Errorf("%s changes the trainer but does not run on it", k.Name)
		case k.Snapshot != snapshotNever && !k.Mutates:
			t.Errorf("%s snapshots a trainer it does not change", k.Name)
		}
	}
	var inv *payload.Invalid
	if _, err := Parse("train_everything", []byte(`{}`)); !errors.As(err, &inv) || inv.Field != "kind" {
		t.Errorf("an unknown kind: %v", err)
	}
	if _, err := Parse(payload.Finish, nil); !errors.As(err, &inv) {
		t.Errorf("finish has no payload to submit: %v", err)
	}
	if KindOf("nope").Mutates || KindOf(payload.Forward).Mutates || !KindOf(payload.OptimStep).Mutates {
		t.Error("mutates")
	}
}
