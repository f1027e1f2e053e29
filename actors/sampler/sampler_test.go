package sampler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wts-project/wts/actors"
	"github.com/wts-project/wts/actors/nodetest"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
)

// sample is a sample payload of one sequence of up to four tokens; required
// is its required_weight_version (0: none).
func sample(required int64) json.RawMessage {
	p := `{"prompt":{"token_ids":[1,2,3]},"parameters":{"max_tokens":4,"temperature":1,"top_p":1,"top_k":-1,"seed":7},"num_samples":1`
	if required > 0 {
		p += fmt.Sprintf(`,"required_weight_version":%d`, required)
	}
	return json.RawMessage(p + "}")
}

// submitTo submits sampler operation seq and returns its handle.
func submitTo(t *testing.T, s *actors.System, sid string, seq int64, kind string, p json.RawMessage) persistence.Operation {
	t.Helper()
	acc, err := s.SubmitToSampler(protocol.Submission{Tenant: nodetest.Tenant, Target: sid, SeqID: seq, IdempotencyKey: fmt.Sprint("s", seq), RequestHash: "h", Kind: kind, Payload: p})
	if err != nil {
		t.Fatalf("sampler operation %d: %v", seq, err)
	}
	return acc.Op
}

// saveWeights trains one step of run and saves its weights for the sampler
// at seq, returning the sampler's id and the weight version.
func saveWeights(t *testing.T, s *actors.System, run string, seq int64) (string, int64) {
	t.Helper()
	nodetest.Loss(t, nodetest.Submit(t, s, run, seq, payload.ForwardBackward, nodetest.Batch(int(seq))))
	nodetest.Submit(t, s, run, seq+1, payload.OptimStep, json.RawMessage(`{"adam_params":{"learning_rate":0.01}}`))
	op := nodetest.Submit(t, s, run, seq+2, payload.SaveWeightsForSampler, json.RawMessage(`{}`))
	var r struct {
		SamplerID     string `json:"sampler_id"`
		WeightVersion int64  `json:"weight_version"`
	}
	if err := json.Unmarshal(op.Result, &r); op.Status != states.OpSucceeded || err != nil {
		t.Fatalf("save_weights_for_sampler: %s %s %v", op.Status, op.Result, err)
	}
	return r.SamplerID, r.WeightVersion
}

// A sampler parks an operation until it holds the weight version the
// operation requires, cancels a parked one on request, and, once its run
// has ended, fails what asks for a version the run never saved.
func TestParkedUntilWeights(t *testing.T) {
	s := nodetest.Start(t, nodetest.Registry(t), t.TempDir())
	defer s.Stop(context.Background())
	_, run := nodetest.NewRun(t, s)
	sid, v := saveWeights(t, s, run.ID, 1)
	if v != 1 {
		t.Fatalf("first weight version %d", v)
	}
	if op := nodetest.Wait(t, s, submitTo(t, s, sid, 1, payload.Sample, sample(1)).ID); op.Status != states.OpSucceeded {
		t.Fatalf("a sample at the synced version: %s %v", op.Status, op.ErrorMessage)
	}

	cancelled := submitTo(t, s, sid, 2, payload.Sample, sample(2))
	parked := submitTo(t, s, sid, 3, payload.Sample, sample(2))
	if cancelled.Status != states.OpParked || parked.Status != states.OpParked {
		t.Fatalf("operations ahead of the weights: %s, %s", cancelled.Status, parked.Status)
	}
	if op, err := s.CancelOperation(nodetest.Tenant, cancelled.ID); err != nil || op.Status != states.OpCancelled {
		t.Fatalf("cancel a parked operation: %+v %v", op, err)
	}
	if _, v := saveWeights(t, s, run.ID, 4); v != 2 {
		t.Fatalf("second weight version %d", v)
	}
	op := nodetest.Wait(t, s, parked.ID)
	var r struct {
		WeightVersion int64 `json:"weight_version"`
	}
	if err := json.Unmarshal(op.Result, &r); op.Status != states.OpSucceeded || err != nil || r.WeightVersion != 2 {
		t.Fatalf("the parked operation once version 2 is saved: %s %s %v", op.Status, op.Result, err)
	}

	never := submitTo(t, s, sid, 4, payload.Sample, sample(9))
	if _, err := s.Finish(nodetest.Tenant, run.ID, "f"); err != nil {
		t.Fatal(err)
	}
	if op := nodetest.Wait(t, s, never.ID); op.Status != states.OpFailed || *op.ErrorCode != protocol.CodeUnreachable {
		t.Fatalf("a version the ended run never saved: %s %v", op.Status, op.ErrorCode)
	}
	if _, err := s.CancelOperation(nodetest.Tenant, nodetest.OpID(t, s, run.ID, 1)); protocol.AsError(err).Code != protocol.CodeInvalidState {
		t.Fatalf("cancelling a run's operation one by one: %v", err)
	}
}

// A sampler nobody uses for its idle time releases its adapter (absent) by
// its reminder, and the next operation brings it back at the same weights.
func TestIdleSamplerReleased(t *testing.T) {
	var offset atomic.Int64
	s, _ := nodetest.StartClocked(t, &offset)
	defer s.Stop(context.Background())
	_, run := nodetest.NewRun(t, s)
	sid, _ := saveWeights(t, s, run.ID, 1)
	status := func() string {
		sm, err := s.GetSampler(nodetest.Tenant, sid)
		if err != nil {
			t.Fatal(err)
		}
		return sm.Status
	}
	// A first operation, answered after the sync that made the sampler
	// ready, which armed its idle reminder.
	if op := nodetest.Wait(t, s, submitTo(t, s, sid, 1, payload.Sample, sample(1)).ID); op.Status != states.OpSucceeded {
		t.Fatalf("a sample at the synced version: %s %v", op.Status, op.ErrorMessage)
	}
	offset.Add(int64(11 * time.Minute)) // past the default idle time
	s.Node().Reminders.Due()
	if st := status(); st != states.SamplerAbsent {
		t.Fatalf("an idle sampler is %s", st)
	}
	op := nodetest.Wait(t, s, submitTo(t, s, sid, 2, payload.Sample, sample(1)).ID)
	if op.Status != states.OpSucceeded || status() != states.SamplerReady {
		t.Fatalf("the first operation after the release: %s %v, sampler %s", op.Status, op.ErrorMessage, status())
	}
}

// A long sample reports its progress while it decodes: tokens and
// sequences so far, of how many, and the rate; a run-scoped one on the
// run's operation.
func TestSampleProgress(t *testing.T) {
	s := nodetest.Start(t, nodetest.RegistryOf(t, "tiny-llama3", nil), t.TempDir()) // a context of 512: a long sample
	defer s.Stop(context.Background())
	_, run := nodetest.NewRun(t, s)
	sid, _ := saveWeights(t, s, run.ID, 1)
	long := json.RawMessage(`{"prompt":{"token_ids":[1,2,3]},"parameters":{"max_tokens":500,"temperature":1,"top_p":1,"top_k":-1,"seed":7},"num_samples":64}`)
	check := func(what, id string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			op, err := s.GetOperation(nodetest.Tenant, id)
			if err != nil {
				t.Fatal(err)
			}
			if states.Terminal(states.OpMoves, op.Status) {
				t.Fatalf("%s ended (%s) with no progress recorded", what, op.Status)
			}
			if op.Progress != nil {
				var p struct {
					TokensDone     int     `json:"tokens_done"`
					TokensTotal    int     `json:"tokens_total"`
					SequencesDone  int     `json:"sequences_done"`
					SequencesTotal int     `json:"sequences_total"`
					TokensPerS     float64 `json:"tokens_per_s"`
				}
				if err := json.Unmarshal(op.Progress, &p); err != nil || p.TokensTotal != 64*500 || p.SequencesTotal != 64 ||
					p.TokensDone < 64 || p.TokensDone > p.TokensTotal || p.SequencesDone > 64 || p.TokensPerS <= 0 || op.ProgressUpdatedAt == nil {
					t.Fatalf("%s progress %s: %+v %v", what, op.Progress, p, err)
				}
				if _, err := s.CancelOperation(nodetest.Tenant, id); err != nil && what == "sample" {
					t.Fatal(err)
				}
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s recorded no progress in 30 s", what)
	}
	check("sample", submitTo(t, s, sid, 1, payload.Sample, long).ID)
	acc, err := s.Submit(protocol.Submission{Tenant: nodetest.Tenant, Target: run.ID, SeqID: 4, IdempotencyKey: "k4", RequestHash: "h", Kind: payload.Sample, Payload: long})
	if err != nil {
		t.Fatal(err)
	}
	check("run-scoped sample", acc.Op.ID)
}
