package httpapi_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/transformer"
)

// step is one operation of a scripted sequence.
type step struct {
	kind    string
	payload any
}

// submit sends steps to a run from seq_id from on, then polls each to its
// end and returns the ended operations (each must succeed).
func (n *node) submit(key, rid string, from int, steps ...step) []*reply {
	n.t.Helper()
	var ids []string
	for i, s := range steps {
		r := n.do("POST", v1+"/runs/"+rid+"/operations", key, op(from+i, fmt.Sprint("k", from+i), s.kind, s.payload))
		n.want(r, 202, "")
		ids = append(ids, r.str("id"))
	}
	var out []*reply
	for _, id := range ids {
		r := n.poll(key, id)
		if r.str("status") != "succeeded" {
			n.t.Fatalf("operation %s: %s", id, r.Raw)
		}
		out = append(out, r)
	}
	return out
}

// result reads a field of an ended operation's result.
func result(r *reply, k string) any { return r.Body["result"].(map[string]any)[k] }

// losses are the loss:sum of the forward_backward operations among ops.
func losses(ops []*reply) []float64 {
	var ls []float64
	for _, r := range ops {
		if r.str("kind") == "forward_backward" {
			ls = append(ls, result(r, "metrics").(map[string]any)["loss:sum"].(float64))
		}
	}
	return ls
}

var train2 = []step{{"forward_backward", batch(2, 9, 1)}, {"optim_step", adam}, {"forward_backward", batch(2, 9, 2)}, {"optim_step", adam}}

// TestCheckpoints saves a run's state, resumes it in a new run (created from
// the checkpoint) and in a third (load_state with the optimizer), and holds
// both to the loss trajectory of the run that went on uninterrupted.
func TestCheckpoints(t *testing.T) {
	n := newNode(t)
	key := n.keys["acme"]
	_, ra := n.session(key, "a")
	n.submit(key, ra, 1, train2...)
	save := n.submit(key, ra, 5, step{"save_state", map[string]any{"name": "after two steps"}})[0]
	cid, _ := result(save, "checkpoint_id").(string)
	if !strings.HasPrefix(cid, "wtc_") || result(save, "step").(float64) != 2 {
		t.Fatalf("save_state result: %s", save.Raw)
	}
	want := losses(n.submit(key, ra, 6, train2...))

	cp := n.do("GET", v1+"/checkpoints/"+cid, key, nil)
	n.want(cp, 200, "")
	if cp.str("run_id") != ra || cp.str("status") != "available" || cp.Body["step"].(float64) != 2 || cp.str("name") != "after two steps" {
		t.Errorf("checkpoint: %s", cp.Raw)
	}
	list := n.do("GET", v1+"/runs/"+ra+"/checkpoints", key, nil)
	n.want(list, 200, "")
	if items := list.Body["items"].([]any); len(items) != 1 || list.Body["next_after_seq"].(float64) != 5 {
		t.Errorf("checkpoint list: %s", list.Raw)
	}

	// A run created from the checkpoint starts where it was saved.
	s := n.do("POST", v1+"/sessions", key, map[string]any{"request_id": "b"})
	n.want(s, 201, "")
	rb := n.do("POST", v1+"/sessions/"+s.str("id")+"/runs", key, map[string]any{
		"request_id": "run-b", "base_model": "tiny", "model_revision": n.revision, "lora": map[string]any{"rank": 4, "seed": 9}, "checkpoint_id": cid})
	n.want(rb, 201, "")
	if rb.str("checkpoint_id") != cid {
		t.Errorf("run from checkpoint: %s", rb.Raw)
	}
	if got := losses(n.submit(key, rb.str("id"), 1, train2...)); !equal(got, want) {
		t.Errorf("resumed run's losses %v, uninterrupted %v", got, want)
	}

	// load_state with the optimizer does the same on a fresh run.
	_, rc := n.session(key, "c")
	n.submit(key, rc, 1, step{"forward_backward", batch(2, 9, 7)}, step{"optim_step", adam})
	loaded := n.submit(key, rc, 3, step{"load_state", map[string]any{"checkpoint_id": cid, "with_optimizer": true}})[0]
	if result(loaded, "step").(float64) != 2 {
		t.Errorf("load_state result: %s", loaded.Raw)
	}
	if got := losses(n.submit(key, rc, 4, train2...)); !equal(got, want) {
		t.Errorf("losses after load_state %v, uninterrupted %v", got, want)
	}

	// After a restart both runs rebuild their trainers (a by replaying all
	// its operations, b from its initial state): they are at the same state.
	n.stop()
	n.start()
	next := step{"forward_backward", batch(2, 9, 4)}
	if la, lb := losses(n.submit(key, ra, 10, next)), losses(n.submit(key, rb.str("id"), 5, next)); !equal(la, lb) {
		t.Errorf("after a restart, the uninterrupted run's loss %v, the resumed one's %v", la, lb)
	}

	// Refusals change nothing.
	_, rd := n.session(key, "d")
	other := n.keys["other"]
	for _, c := range []struct {
		name, key, rid string
		body           []byte
		status         int
		code           string
	}{
		{"unknown checkpoint", key, rd, op(1, "x", "load_state", map[string]any{"checkpoint_id": "wtc_" + strings.Repeat("0", 32)}), 404, "checkpoint_not_found"},
		{"malformed checkpoint id", key, rd, op(1, "x", "load_state", map[string]any{"checkpoint_id": "wtc_x"}), 422, "validation_error"},
		{"no checkpoint id", key, rd, op(1, "x", "load_state", map[string]any{}), 422, "validation_error"},
		{"unknown payload field", key, rd, op(1, "x", "save_state", map[string]any{"path": "/etc"}), 422, "validation_error"},
		{"name too long", key, rd, op(1, "x", "save_state", map[string]any{"name": strings.Repeat("n", 201)}), 422, "validation_error"},
	} {
		r := n.do("POST", v1+"/runs/"+c.rid+"/operations", c.key, c.body)
		if r.Status != c.status || r.code() != c.code {
			t.Errorf("%s: got %d %s, want %d %s: %s", c.name, r.Status, r.code(), c.status, c.code, r.Raw)
		}
	}
	so := n.do("POST", v1+"/sessions", other, map[string]any{"request_id": "o"})
	n.want(so, 201, "")
	n.want(n.do("GET", v1+"/checkpoints/"+cid, other, nil), 404, "checkpoint_not_found")
	n.want(n.do("GET", v1+"/checkpoints/"+cid, n.keys["acme-live"], nil), 404, "checkpoint_not_found")
	n.want(n.do("POST", v1+"/sessions/"+so.str("id")+"/runs", other, map[string]any{
		"request_id": "r", "base_model": "tiny", "model_revision": n.revision, "lora": map[string]any{"rank": 4}, "checkpoint_id": cid}), 404, "checkpoint_not_found")
	se := n.do("POST", v1+"/sessions", key, map[string]any{"request_id": "e"})
	n.want(n.do("POST", v1+"/sessions/"+se.str("id")+"/runs", key, map[string]any{
		"request_id": "r", "base_model": "tiny", "model_revision": n.revision, "lora": map[string]any{"rank": 8}, "checkpoint_id": cid}), 422, "checkpoint_incompatible")
	if r := n.do("GET", v1+"/runs/"+rd, key, nil); r.Body["next_seq_id"].(float64) != 1 {
		t.Errorf("refusals changed the run: %s", r.Raw)
	}
	// Retiring run a removes its checkpoint's files; run b, which started
	// from that checkpoint, rebuilds after a restart all the same.
	n.want(n.do("POST", v1+"/runs/"+ra+"/cancel", key, map[string]any{"request_id": "c"}), 202, "")
	for n.do("GET", v1+"/runs/"+ra, key, nil).str("status") != "cancelled" {
		time.Sleep(10 * time.Millisecond)
	}
	if n.do("GET", v1+"/runs/"+ra, key, nil).Body["retired"] != false {
		t.Error("a run not retired reads retired")
	}
	n.want(n.do("POST", v1+"/runs/"+ra+"/retire", key, map[string]any{"request_id": "r"}), 200, "")
	if r := n.do("GET", v1+"/runs/"+ra, key, nil); r.Body["retired"] != true {
		t.Errorf("a retired run's GET: %s", r.Raw)
	}
	n.stop()
	n.start()
	n.submit(key, rb.str("id"), 6, next)

	// Run b holds the checkpoint it started from, run c the snapshot taken
	// after its load_state; the refused creation left nothing.
	var folders []string
	entries, _ := os.ReadDir(filepath.Join(n.data, "runs"))
	for _, e := range entries {
		folders = append(folders, e.Name())
	}
	if want := []string{rb.str("id"), rc}; !sameSet(folders, want) {
		t.Errorf("training volume holds %v, want %v", folders, want)
	}
}

// TestExportLoRA exports a trained adapter and loads it back into the
// engine: PEFT's names and config, and the same logprobs as the run's own
// forward on the same weights.
func TestExportLoRA(t *testing.T) {
	n := newNode(t)
	key := n.keys["acme"]
	_, rid := n.session(key, "x")
	probe := batch(1, 9, 3)
	ops := n.submit(key, rid, 1, append(train2, step{"forward", probe}, step{"export_lora", map[string]any{}})...)
	fwd, exp := ops[4], ops[5]
	aid, _ := result(exp, "artifact_id").(string)
	a := n.do("GET", v1+"/artifacts/"+aid, key, nil)
	n.want(a, 200, "")
	if a.str("run_id") != rid || a.str("kind") != "lora_adapter" || a.str("status") != "available" || a.str("checksum") != result(exp, "checksum") {
		t.Fatalf("artifact: %s", a.Raw)
	}
	var names []string
	for _, f := range a.Body["files"].([]any) {
		names = append(names, f.(map[string]any)["path"].(string))
	}
	if strings.Join(names, ",") != "README.md,adapter_config.json,adapter_model.safetensors" {
		t.Errorf("artifact files %v", names)
	}
	list := n.do("GET", v1+"/runs/"+rid+"/artifacts", key, nil)
	n.want(list, 200, "")
	if items := list.Body["items"].([]any); len(items) != 1 {
		t.Errorf("artifact list: %s", list.Raw)
	}
	n.want(n.do("GET", v1+"/artifacts/"+aid, n.keys["other"], nil), 404, "not_found")
	n.want(n.do("GET", v1+"/artifacts/not-a-uuid", key, nil), 404, "not_found")

	dir := filepath.Join(n.data, "artifacts", rid, "exports", aid)
	card, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil || !strings.Contains(string(card), "base_model: tiny\nlibrary_name: peft\n") {
		t.Errorf("model card: %v\n%s", err, card)
	}
	w, err := model.Load(n.modelDir)
	if err != nil {
		t.Fatal(err)
	}
	m := transformer.New(w)
	ad, err := lora.LoadPEFT(dir, m.Cfg())
	if err != nil {
		t.Fatal(err)
	}
	toks := probe["data"].([]any)[0].(map[string]any)["model_input"].(map[string]any)["token_ids"].([]int)
	targets := probe["data"].([]any)[0].(map[string]any)["loss_fn_inputs"].(map[string]any)["target_tokens"].([]int)
	lp, err := sampler.Logprobs(sampler.OnCPU(m), m.Freeze(ad), append(toks, targets[len(targets)-1]))
	if err != nil {
		t.Fatal(err)
	}
	served := result(fwd, "loss_fn_outputs").([]any)[0].(map[string]any)["logprobs"].([]any)
	for i, v := range served {
		if got := *lp[i+1]; math.Abs(got-v.(float64)) > 1e-4 {
			t.Errorf("token %d: exported adapter gives logprob %v, the run's forward gave %v", i, got, v)
		}
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sameSet(a, b []string) bool {
	seen := map[string]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		seen[x]--
	}
	for _, c := range seen {
		if c != 0 {
			return false
		}
	}
	return true
}
