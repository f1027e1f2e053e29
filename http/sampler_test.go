package httpapi_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// sampleBody is a sample payload of n sequences of up to max tokens.
func sampleBody(prompt []int, n, max int, seed int, required any) map[string]any {
	p := map[string]any{
		"prompt":      map[string]any{"token_ids": prompt},
		"parameters":  map[string]any{"max_tokens": max, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "seed": seed},
		"num_samples": n,
	}
	if required != nil {
		p["required_weight_version"] = required
	}
	return p
}

// samplerOp submits a sampler operation and returns its handle.
func (n *node) samplerOp(key, sid string, seq int, kind string, payload any) *reply {
	n.t.Helper()
	r := n.do("POST", v1+"/samplers/"+sid+"/operations", key, op(seq, fmt.Sprint("s", seq), kind, payload))
	n.want(r, 202, "")
	return r
}

func sequences(r *reply) []map[string]any {
	var out []map[string]any
	for _, s := range result(r, "sequences").([]any) {
		out = append(out, s.(map[string]any))
	}
	return out
}

func ints(v any) []int {
	var out []int
	for _, x := range v.([]any) {
		out = append(out, int(x.(float64)))
	}
	return out
}

// TestSamplers walks the sampler's life: a run-scoped sample creates it and
// syncs the run's weights in that one operation; its own operations follow
// their seq_id order; required_weight_version parks an operation until
// save_weights_for_sampler brings that version, and fails it once the run
// ends short of it; sampled tokens' logprobs equal a logprobs call on the
// same sequence; an idle sampler releases its memory and comes back.
func TestSamplers(t *testing.T) {
	n := newNode(t, "--sampler-idle", "1s")
	key := n.keys["acme"]
	sess, rid := n.session(key, "s")
	n.submit(key, rid, 1, train2...)
	prompt := []int{5, 9, 13, 2}

	// 1. A run-scoped sample, the run's first sampler action.
	first := n.submit(key, rid, 5, step{"sample", sampleBody(prompt, 3, 6, 7, nil)})[0]
	if seqs := sequences(first); len(seqs) != 3 || result(first, "weight_version").(float64) != 1 {
		t.Fatalf("run-scoped sample: %s", first.Raw)
	}
	run := n.do("GET", v1+"/runs/"+rid, key, nil)
	sid := run.str("sampler_id")
	if run.Body["latest_weight_version"].(float64) != 1 || sid == "" {
		t.Fatalf("run after its first sample: %s", run.Raw)
	}
	sm := n.do("GET", v1+"/samplers/"+sid, key, nil)
	n.want(sm, 200, "")
	if sm.str("status") != "ready" || sm.Body["synced_weight_version"].(float64) != 1 || sm.str("run_id") != rid {
		t.Fatalf("sampler: %s", sm.Raw)
	}

	// 2. The sampler's own sample, same seed and weights: same tokens; and
	// logprobs of each sequence equal the sampled tokens' logprobs.
	again := n.poll(key, n.samplerOp(key, sid, 1, "sample", sampleBody(prompt, 3, 6, 7, 1)).str("id"))
	for i, s := range sequences(again) {
		want := sequences(first)[i]
		if fmt.Sprint(s["tokens"]) != fmt.Sprint(want["tokens"]) {
			t.Errorf("sequence %d: sampler %v, run-scoped %v", i, s["tokens"], want["tokens"])
		}
		toks := ints(s["tokens"])
		lp := n.poll(key, n.samplerOp(key, sid, 2+i, "logprobs", map[string]any{"input": map[string]any{"token_ids": append(append([]int{}, prompt...), toks...)}}).str("id"))
		got := result(lp, "logprobs").([]any)
		if got[0] != nil || len(got) != len(prompt)+len(toks) {
			t.Fatalf("logprobs: %s", lp.Raw)
		}
		for j, w := range s["logprobs"].([]any) {
			if g := got[len(prompt)+j].(float64); math.Abs(g-w.(float64)) > 1e-4 {
				t.Errorf("sequence %d token %d: sampled logprob %v, logprobs call %v", i, j, w, g)
			}
		}
	}

	// 3. required_weight_version 2 parks until the run saves version 2.
	parked := n.samplerOp(key, sid, 5, "sample", sampleBody(prompt, 1, 4, 1, 2))
	if parked.str("status") != "parked" {
		t.Fatalf("an operation ahead of the sampler's weights: %s", parked.Raw)
	}
	time.Sleep(100 * time.Millisecond)
	if r := n.do("GET", v1+"/operations/"+parked.str("id"), key, nil); r.str("status") != "parked" {
		t.Fatalf("the parked operation moved before version 2 existed: %s", r.Raw)
	}
	saved := n.submit(key, rid, 6, step{"forward_backward", batch(2, 9, 5)}, step{"optim_step", adam}, step{"save_weights_for_sampler", map[string]any{}})[2]
	if result(saved, "weight_version").(float64) != 2 || result(saved, "sampler_id") != sid {
		t.Fatalf("save_weights_for_sampler: %s", saved.Raw)
	}
	if r := n.poll(key, parked.str("id")); r.str("status") != "succeeded" || result(r, "weight_version").(float64) != 2 {
		t.Fatalf("the parked operation: %s", r.Raw)
	}

	// Refusals change nothing.
	for _, c := range []struct {
		name   string
		key    string
		body   []byte
		status int
		code   string
	}{
		{"training kind", key, op(6, "x", "forward", batch(1, 3, 1)), 422, "validation_error"},
		{"extra payload field", key, op(6, "x", "logprobs", map[string]any{"input": map[string]any{"token_ids": []int{1}}, "top": 3}), 422, "validation_error"},
		{"too many samples", key, op(6, "x", "sample", sampleBody(prompt, 65, 4, 1, nil)), 422, "validation_error"},
		{"token outside the vocabulary", key, op(6, "x", "logprobs", map[string]any{"input": map[string]any{"token_ids": []int{1, 100000}}}), 422, "token_out_of_range"},
		{"seq_id ahead", key, op(9, "x", "logprobs", map[string]any{"input": map[string]any{"token_ids": []int{1}}}), 409, "seq_id_mismatch"},
		{"another organization", n.keys["other"], op(6, "x", "logprobs", map[string]any{"input": map[string]any{"token_ids": []int{1}}}), 404, "not_found"},
	} {
		r := n.do("POST", v1+"/samplers/"+sid+"/operations", c.key, c.body)
		if r.Status != c.status || r.code() != c.code {
			t.Errorf("%s: got %d %s, want %d %s", c.name, r.Status, r.code(), c.status, c.code)
		}
	}
	n.want(n.do("POST", v1+"/runs/"+rid+"/operations", key, op(9, "rs", "sample", sampleBody(prompt, 1, 2, 1, 1))), 422, "validation_error")

	// 4. Idle: the sampler releases its adapter, and the next operation
	// brings it back.
	deadline := time.Now().Add(20 * time.Second)
	for n.do("GET", v1+"/samplers/"+sid, key, nil).str("status") != "absent" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if s := n.do("GET", v1+"/samplers/"+sid, key, nil); s.str("status") != "absent" {
		t.Fatalf("an idle sampler: %s", s.Raw)
	}
	back := n.poll(key, n.samplerOp(key, sid, 6, "sample", sampleBody(prompt, 1, 3, 1, nil)).str("id"))
	if back.str("status") != "succeeded" || n.do("GET", v1+"/samplers/"+sid, key, nil).str("status") != "ready" {
		t.Fatalf("after idle: %s", back.Raw)
	}

	// 5. After a restart the sampler serves again; once the run ends, a
	// version it never reached fails its operation.
	n.stop()
	n.start()
	waiting := n.samplerOp(key, sid, 7, "sample", sampleBody(prompt, 1, 3, 1, 3))
	if waiting.str("status") != "parked" {
		t.Fatalf("parked after restart: %s", waiting.Raw)
	}
	n.want(n.do("POST", v1+"/runs/"+rid+"/finish", key, map[string]any{"request_id": "f"}), 202, "")
	r := n.poll(key, waiting.str("id"))
	if r.str("status") != "failed" || r.str("error_code") != "weight_version_unreachable" {
		t.Fatalf("a version the ended run never reached: %s", r.Raw)
	}
	late := n.samplerOp(key, sid, 8, "logprobs", map[string]any{"input": map[string]any{"token_ids": []int{1, 2}}, "required_weight_version": 9})
	if late.str("status") != "failed" || late.str("error_code") != "weight_version_unreachable" {
		t.Fatalf("unreachable at submission: %s", late.Raw)
	}
	if ok := n.poll(key, n.samplerOp(key, sid, 9, "logprobs", map[string]any{"input": map[string]any{"token_ids": []int{1, 2}}}).str("id")); ok.str("status") != "succeeded" {
		t.Fatalf("sampling after the run ended: %s", ok.Raw)
	}

	// The sampler's operations list in its own seq_id order.
	list := n.do("GET", v1+"/samplers/"+sid+"/operations?limit=3", key, nil)
	n.want(list, 200, "")
	if items := list.Body["items"].([]any); len(items) != 3 || items[0].(map[string]any)["seq_id"].(float64) != 1 || list.Body["next_after_seq"].(float64) != 3 {
		t.Errorf("sampler operations: %s", list.Raw)
	}

	// Sampling is metered: provider_a bills the device time of each sampler
	// operation, pending until it settles.
	sampled := 0
	for _, it := range n.do("GET", v1+"/sessions/"+sess+"/usage", key, nil).Body["items"].([]any) {
		u := it.(map[string]any)
		if u["meter"] != "device_ms" || u["settlement_status"] != "pending" || u["cost_microusd"].(float64) <= 0 {
			t.Errorf("sampling usage: %v", u)
		}
		sampled++
	}
	if sampled < 8 { // the run-scoped sample, 4 samples and logprobs before, and those after
		t.Errorf("%d device_ms components", sampled)
	}

	// 6. Retiring the run retires its sampler.
	n.want(n.do("POST", v1+"/runs/"+rid+"/retire", key, map[string]any{"request_id": "r"}), 200, "")
	if s := n.do("GET", v1+"/samplers/"+sid, key, nil); s.str("status") != "retired" {
		t.Errorf("sampler of a retired run: %s", s.Raw)
	}
	n.want(n.do("POST", v1+"/samplers/"+sid+"/operations", key, op(10, "z", "logprobs", map[string]any{"input": map[string]any{"token_ids": []int{1}}})), 409, "sampler_not_accepting")
}

// TestSamplerSyncFailure damages the weights a released sampler must load
// again: its operation fails (sampler_failed), the sampler is failed, and the
// run's next weight version brings it back.
func TestSamplerSyncFailure(t *testing.T) {
	n := newNode(t, "--sampler-idle", "1s")
	key := n.keys["acme"]
	_, rid := n.session(key, "f")
	sid := result(n.submit(key, rid, 1, step{"save_weights_for_sampler", map[string]any{}})[0], "sampler_id").(string)
	status := func(want string) *reply {
		deadline := time.Now().Add(20 * time.Second)
		for {
			s := n.do("GET", v1+"/samplers/"+sid, key, nil)
			if s.str("status") == want || time.Now().After(deadline) {
				return s
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if s := status("absent"); s.str("status") != "absent" {
		t.Fatalf("sampler: %s", s.Raw)
	}
	weights := filepath.Join(n.data, "runs", rid, "weights", "1", "adapter_model.safetensors")
	if err := os.WriteFile(weights, []byte("damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := n.poll(key, n.samplerOp(key, sid, 1, "logprobs", map[string]any{"input": map[string]any{"token_ids": []int{1, 2, 3}}}).str("id"))
	if r.str("status") != "failed" || r.str("error_code") != "sampler_failed" {
		t.Fatalf("an operation on weights that do not load: %s", r.Raw)
	}
	if s := status("failed"); s.str("status") != "failed" || s.str("error_code") == "" {
		t.Fatalf("sampler after a failed sync: %s", s.Raw)
	}
	n.submit(key, rid, 2, step{"save_weights_for_sampler", map[string]any{}})
	if s := status("ready"); s.Body["synced_weight_version"].(float64) != 2 {
		t.Fatalf("sampler after a new version: %s", s.Raw)
	}
	if r := n.poll(key, n.samplerOp(key, sid, 2, "logprobs", map[string]any{"input": map[string]any{"token_ids": []int{1, 2, 3}}}).str("id")); r.str("status") != "succeeded" {
		t.Fatalf("after recovery: %s", r.Raw)
	}
}
