package httpapi_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	httpapi "github.com/wts-project/wts/http"
	"github.com/wts-project/wts/kernels/tokenizer"
)

const v1 = "/v1/training"

func TestTrainingFlow(t *testing.T) {
	n := newNode(t)
	key := n.keys["acme"]
	// The catalog tells a caller the revision a run names.
	models := n.do("GET", v1+"/models", key, nil)
	n.want(models, 200, "")
	if items := models.Body["items"].([]any); len(items) != 1 || items[0].(map[string]any)["name"] != "tiny" ||
		items[0].(map[string]any)["revision"] != n.revision || items[0].(map[string]any)["tokenizer"] != false ||
		fmt.Sprint(items[0].(map[string]any)["providers"]) != "[provider_a provider_b]" {
		t.Fatalf("models: %s", models.Raw)
	}
	sid, rid := n.session(key, "flow")

	var ids []string
	for seq, o := range []struct {
		kind    string
		payload any
	}{{"forward_backward", batch(2, 9, 1)}, {"optim_step", adam}, {"forward_backward", batch(2, 9, 1)}, {"optim_step", adam}, {"forward", batch(2, 9, 1)}} {
		r := n.do("POST", v1+"/runs/"+rid+"/operations", key, op(seq+1, fmt.Sprint("k", seq), o.kind, o.payload))
		n.want(r, 202, "")
		if r.str("status") != "pending" && r.str("status") != "executing" && r.str("status") != "succeeded" {
			t.Fatalf("new operation status %s", r.str("status"))
		}
		for _, f := range []string{"id", "session_id", "run_id", "seq_id", "kind", "status", "result", "error_code", "progress", "progress_updated_at", "created_at", "updated_at"} {
			if _, ok := r.Body[f]; !ok {
				t.Errorf("operation lacks %s: %s", f, r.Raw)
			}
		}
		ids = append(ids, r.str("id"))
	}
	var losses []float64
	for _, id := range ids {
		r := n.poll(key, id)
		if r.str("status") != "succeeded" {
			t.Fatalf("operation %s: %s", id, r.Raw)
		}
		res := r.Body["result"].(map[string]any)
		if m, ok := res["metrics"].(map[string]any); ok {
			if l, ok := m["loss:sum"].(float64); ok {
				losses = append(losses, l)
			}
		}
	}
	if len(losses) != 3 || !(losses[2] < losses[0]) {
		t.Errorf("losses over fwd-bwd, fwd-bwd, forward on one batch should fall: %v", losses)
	}

	// Listing pages in seq order.
	p := n.do("GET", v1+"/runs/"+rid+"/operations?limit=2", key, nil)
	n.want(p, 200, "")
	items := p.Body["items"].([]any)
	if len(items) != 2 || p.Body["next_after_seq"].(float64) != 2 {
		t.Fatalf("page 1: %s", p.Raw)
	}
	p = n.do("GET", v1+"/runs/"+rid+"/operations?after_seq=2&limit=500", key, nil)
	items = p.Body["items"].([]any)
	if len(items) != 3 || items[0].(map[string]any)["seq_id"].(float64) != 3 || p.Body["next_after_seq"].(float64) != 5 {
		t.Fatalf("page 2: %s", p.Raw)
	}

	// Metrics: a step record per forward_backward and optim_step.
	m := n.do("GET", v1+"/runs/"+rid+"/metrics", key, nil)
	n.want(m, 200, "")
	if got := len(m.Body["items"].([]any)); got != 4 {
		t.Fatalf("metrics items %d: %s", got, m.Raw)
	}
	sum := m.Body["summary"].(map[string]any)["loss:sum"].(map[string]any)
	if sum["count"].(float64) != 2 || sum["min"].(float64) > sum["max"].(float64) || sum["last"].(float64) != sum["min"].(float64) {
		t.Errorf("loss:sum summary: %v", sum)
	}

	// The run and session as a caller sees them.
	run := n.do("GET", v1+"/runs/"+rid, key, nil)
	if run.str("status") != "running" || run.Body["next_seq_id"].(float64) != 6 {
		t.Fatalf("run: %s", run.Raw)
	}
	hb := n.do("POST", v1+"/sessions/"+sid+"/heartbeat", key, map[string]any{"request_id": "hb1"})
	n.want(hb, 200, "")
	n.checkUsage(sid, key)
	n.checkPrometheus(map[string]float64{
		`wts_http_requests_total{method="POST",route="/v1/training/runs/{run_id}/operations",status="202"}`: 5,
		`wts_operations_accepted_total{kind="forward_backward"}`:                                            2,
		`wts_operations_executed_total{kind="optim_step",status="succeeded"}`:                               2,
		`wts_operation_execution_seconds_count{kind="forward"}`:                                             1,
	}, "wts_store_commits_total", "wts_store_commit_duration_seconds_bucket", "go_goroutines")

	// Finish: the run ends after its queued work; nothing more is taken.
	f := n.do("POST", v1+"/runs/"+rid+"/finish", key, map[string]any{"request_id": "fin"})
	n.want(f, 202, "")
	if f.str("kind") != "finish" || f.Body["seq_id"].(float64) != 6 {
		t.Fatalf("finish: %s", f.Raw)
	}
	n.poll(key, f.str("id"))
	if again := n.do("POST", v1+"/runs/"+rid+"/finish", key, map[string]any{"request_id": "fin"}); again.str("id") != f.str("id") {
		t.Errorf("repeated finish made a new operation: %s", again.Raw)
	}
	if s := n.do("GET", v1+"/runs/"+rid, key, nil).str("status"); s != "finished" {
		t.Fatalf("run after finish: %s", s)
	}
	n.want(n.do("POST", v1+"/runs/"+rid+"/operations", key, op(7, "late", "forward", batch(1, 4, 1))), 409, "run_not_accepting")
	n.checkUsage(sid, key)

	c := n.do("POST", v1+"/sessions/"+sid+"/close", key, map[string]any{"request_id": "close"})
	n.want(c, 200, "")
	if c.str("status") != "closed" {
		t.Errorf("closing a session whose run ended: %s", c.Raw)
	}
}

func TestSequenceAndIdempotency(t *testing.T) {
	n := newNode(t)
	key := n.keys["acme"]
	sid, rid := n.session(key, "seq")
	path := v1 + "/runs/" + rid + "/operations"

	// A creation's request_id names one request: the same body (however
	// spelled) returns what it made, another body is a conflict.
	same := n.do("POST", v1+"/sessions", key, []byte(` { "request_id" : "seq" } `))
	n.want(same, 200, "")
	if same.str("id") != sid {
		t.Fatalf("a repeated session creation made %s, not %s", same.str("id"), sid)
	}
	n.want(n.do("POST", v1+"/sessions", key, map[string]any{"request_id": "seq", "idle_ttl_s": 120}), 409, "idempotency_conflict")
	n.want(n.do("POST", v1+"/sessions/"+sid+"/runs", key, map[string]any{
		"request_id": "run-seq", "base_model": "tiny", "model_revision": n.revision, "lora": map[string]any{"rank": 8, "seed": 3}}), 409, "idempotency_conflict")
	n.want(n.do("POST", v1+"/sessions/"+sid+"/runs", key, map[string]any{
		"lora": map[string]any{"seed": 3, "rank": 4}, "request_id": "run-seq", "base_model": "tiny", "model_revision": n.revision}), 200, "")

	r := n.do("POST", path, key, op(2, "a", "forward", batch(1, 4, 1)))
	n.want(r, 409, "seq_id_mismatch")
	if !strings.Contains(r.Body["error"].(map[string]any)["message"].(string), "next_seq_id 1") {
		t.Errorf("mismatch message does not state the expected seq_id: %s", r.Raw)
	}
	first := n.do("POST", path, key, op(1, "a", "forward", batch(1, 4, 1)))
	n.want(first, 202, "")
	again := n.do("POST", path, key, op(1, "a", "forward", batch(1, 4, 1)))
	n.want(again, 202, "")
	if again.str("id") != first.str("id") {
		t.Fatalf("retry made a new operation")
	}
	n.want(n.do("POST", path, key, op(1, "a", "forward", batch(1, 5, 1))), 409, "idempotency_conflict")
	n.want(n.do("POST", path, key, op(2, "a", "forward", batch(1, 5, 1))), 409, "idempotency_conflict")

	// A wrong hash is refused and names the right one.
	var body map[string]any
	json.Unmarshal(op(2, "b", "forward", batch(1, 4, 1)), &body)
	body["request_hash"] = strings.Repeat("0", 64)
	bad, _ := json.Marshal(body)
	n.want(n.do("POST", path, key, bad), 422, "request_hash_mismatch")
	// Reordered keys and whitespace hash the same (canonical JSON).
	n.want(n.do("POST", path, key, op(2, "b", "forward", batch(1, 4, 1))), 202, "")
	if got := n.do("GET", v1+"/runs/"+rid, key, nil).Body["next_seq_id"].(float64); got != 3 {
		t.Errorf("next_seq_id %v after two accepted operations", got)
	}
}

func TestTenancy(t *testing.T) {
	n := newNode(t)
	// A key made while the node runs (through its admin socket) works at once.
	out, err := exec.Command(binary, "keys", "create", "--org", "late", "--data", n.data).Output()
	if err != nil {
		t.Fatalf("keys create on a running node: %v", err)
	}
	n.want(n.do("POST", v1+"/sessions", strings.TrimSpace(string(out)), map[string]any{"request_id": "late"}), 201, "")
	// The node declares its device's capacity on the same socket.
	out, err = exec.Command(binary, "node", "--data", n.data).Output()
	var node httpapi.NodeReply
	if err != nil || json.Unmarshal(out, &node) != nil || len(node.Devices) != 1 || node.Devices[0].Threads < 1 ||
		node.Devices[0].MemoryBytes <= 0 || node.Devices[0].FreeBytes > node.Devices[0].MemoryBytes {
		t.Fatalf("wts node: %v %s", err, out)
	}

	sid, rid := n.session(n.keys["acme"], "mine")
	opID := n.do("POST", v1+"/runs/"+rid+"/operations", n.keys["acme"], op(1, "a", "forward", batch(1, 4, 1))).str("id")
	for _, key := range []string{n.keys["other"], n.keys["acme-live"]} {
		for _, path := range []string{"/sessions/" + sid, "/runs/" + rid, "/operations/" + opID, "/runs/" + rid + "/operations", "/runs/" + rid + "/metrics"} {
			n.want(n.do("GET", v1+path, key, nil), 404, "not_found")
		}
		n.want(n.do("POST", v1+"/runs/"+rid+"/operations", key, op(2, "x", "forward", batch(1, 4, 1))), 404, "not_found")
		n.want(n.do("POST", v1+"/sessions/"+sid+"/heartbeat", key, map[string]any{"request_id": "x"}), 404, "not_found")
		n.want(n.do("POST", v1+"/runs/"+rid+"/cancel", key, map[string]any{"request_id": "x"}), 404, "not_found")
	}
	n.want(n.do("GET", v1+"/sessions/"+sid, "", nil), 401, "unauthorized")
	n.want(n.do("GET", v1+"/sessions/"+sid, "svc_test_"+strings.Repeat("0", 48), nil), 401, "unauthorized")
	n.want(n.do("GET", v1+"/sessions/"+sid, strings.Replace(n.keys["acme"], "svc_test_", "svc_live_", 1), nil), 401, "unauthorized")
	// The same request_id in another organization is another session.
	other := n.do("POST", v1+"/sessions", n.keys["other"], map[string]any{"request_id": "mine"})
	n.want(other, 201, "")
	if other.str("id") == sid {
		t.Fatal("request_id crossed organizations")
	}

	// Each organization lists its own sessions and runs, newest first.
	sid2, rid2 := n.session(n.keys["acme"], "mine-too")
	ids := func(r *reply) []string {
		var out []string
		for _, it := range r.Body["items"].([]any) {
			out = append(out, it.(map[string]any)["id"].(string))
		}
		return out
	}
	if got := ids(n.do("GET", v1+"/sessions", n.keys["acme"], nil)); fmt.Sprint(got) != fmt.Sprint([]string{sid2, sid}) {
		t.Fatalf("acme's sessions %v, want %v", got, []string{sid2, sid})
	}
	first := n.do("GET", v1+"/runs?limit=1", n.keys["acme"], nil)
	next := n.do("GET", v1+"/runs?limit=1&after="+first.str("next_after"), n.keys["acme"], nil)
	last := n.do("GET", v1+"/runs?after="+next.str("next_after"), n.keys["acme"], nil)
	if fmt.Sprint(ids(first), ids(next), ids(last)) != fmt.Sprint([]string{rid2}, []string{rid}, []string(nil)) || last.str("next_after") != rid {
		t.Fatalf("acme's runs a page at a time: %s %s %s", first.Raw, next.Raw, last.Raw)
	}
	if got := ids(n.do("GET", v1+"/sessions", n.keys["other"], nil)); fmt.Sprint(got) != fmt.Sprint([]string{other.str("id")}) {
		t.Fatalf("other's sessions %v", got)
	}
	if r := n.do("GET", v1+"/runs", n.keys["acme-live"], nil); len(ids(r)) != 0 || r.Body["next_after"] != nil {
		t.Fatalf("live key's runs: %s", r.Raw)
	}
	n.want(n.do("GET", v1+"/sessions?after="+sid, n.keys["other"], nil), 404, "not_found")
	n.want(n.do("GET", v1+"/sessions?after=nope", n.keys["acme"], nil), 422, "validation_error")
	n.want(n.do("GET", v1+"/runs?limit=0", n.keys["acme"], nil), 422, "validation_error")
}

func TestErrors(t *testing.T) {
	n := newNode(t, "--max-body", "4096")
	key := n.keys["acme"]
	sid, rid := n.session(key, "errs")
	ops := v1 + "/runs/" + rid + "/operations"
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code               string
		headers            []string
	}{
		{"unknown path", "GET", "/v1/nothing", nil, 404, "not_found", nil},
		{"malformed id", "GET", v1 + "/runs/wtr_xyz", nil, 404, "not_found", nil},
		{"wrong method", "DELETE", v1 + "/runs/" + rid, nil, 405, "method_not_allowed", nil},
		{"content type", "POST", v1 + "/sessions", `{"request_id":"x"}`, 415, "unsupported_media_type", []string{"Content-Type", "text/plain"}},
		{"too large", "POST", ops, strings.Repeat(" ", 5000) + "{}", 413, "payload_too_large", nil},
		{"malformed", "POST", v1 + "/sessions", `{"request_id":`, 400, "malformed_json", nil},
		{"empty", "POST", v1 + "/sessions", ``, 400, "malformed_json", nil},
		{"trailing", "POST", v1 + "/sessions", `{"request_id":"x"} {}`, 400, "malformed_json", nil},
		{"unknown field", "POST", v1 + "/sessions", `{"request_id":"x","colour":1}`, 422, "validation_error", nil},
		{"missing request_id", "POST", v1 + "/sessions", `{}`, 422, "validation_error", nil},
		{"long request_id", "POST", v1 + "/sessions", map[string]any{"request_id": strings.Repeat("x", 201)}, 422, "validation_error", nil},
		{"bad enum", "POST", v1 + "/sessions", map[string]any{"request_id": "x", "provider": "provider_c"}, 422, "validation_error", nil},
		{"ttl range", "POST", v1 + "/sessions", map[string]any{"request_id": "x", "idle_ttl_s": 59}, 422, "validation_error", nil},
		{"cost type", "POST", v1 + "/sessions", map[string]any{"request_id": "x", "max_cost_microusd": 1.5}, 422, "validation_error", nil},
		{"byok without credential", "POST", v1 + "/sessions", map[string]any{"request_id": "x", "funding_preference": "byok"}, 422, "validation_error", nil},
		{"unknown credential", "POST", v1 + "/sessions", map[string]any{"request_id": "x", "credential_id": "cred"}, 404, "credential_not_found", nil},
		{"second run", "POST", v1 + "/sessions/" + sid + "/runs", map[string]any{"request_id": "another", "base_model": "tiny", "model_revision": n.revision}, 409, "run_already_exists", nil},
		{"full with lora", "POST", v1 + "/sessions/" + sid + "/runs", map[string]any{"request_id": "r", "base_model": "tiny", "model_revision": n.revision, "tuning_mode": "full", "lora": map[string]any{"rank": 2}}, 422, "validation_error", nil},
		{"no train target", "POST", v1 + "/sessions/" + sid + "/runs", map[string]any{"request_id": "r", "base_model": "tiny", "model_revision": n.revision, "lora": map[string]any{"train_mlp": false, "train_attn": false, "train_unembed": false}}, 422, "validation_error", nil},
		{"short revision", "POST", v1 + "/sessions/" + sid + "/runs", map[string]any{"request_id": "r", "base_model": "tiny", "model_revision": "abc"}, 422, "validation_error", nil},
		{"seq range", "POST", ops, op(0, "k", "forward", batch(1, 4, 1)), 422, "validation_error", nil},
		{"bad kind", "POST", ops, op(1, "k", "train", batch(1, 4, 1)), 422, "validation_error", nil},
		{"hash pattern", "POST", ops, `{"seq_id":1,"idempotency_key":"k","kind":"forward","payload":{},"request_hash":"ABC"}`, 422, "validation_error", nil},
		{"no tokens", "POST", ops, op(1, "k", "forward", map[string]any{"data": []any{map[string]any{"model_input": map[string]any{"token_ids": []int{}}, "loss_fn_inputs": map[string]any{"target_tokens": []int{}}}}}), 422, "validation_error", nil},
		{"token outside vocab", "POST", ops, op(1, "k", "forward", map[string]any{"data": []any{map[string]any{"model_input": map[string]any{"token_ids": []int{1, 100000}}, "loss_fn_inputs": map[string]any{"target_tokens": []int{1, 2}}}}}), 422, "token_out_of_range", nil},
		{"unknown loss", "POST", ops, op(1, "k", "forward", map[string]any{"loss_fn": "mse", "data": batch(1, 4, 1)["data"]}), 422, "validation_error", nil},
		{"bad lr", "POST", ops, op(1, "k", "optim_step", map[string]any{"adam_params": map[string]any{"learning_rate": -1}}), 422, "validation_error", nil},
		{"paging", "GET", ops + "?limit=501", nil, 422, "validation_error", nil},
		{"unknown query", "GET", ops + "?page=2", nil, 422, "validation_error", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := n.do(c.method, c.path, key, c.body, c.headers...)
			if r.Status != c.status || r.code() != c.code {
				t.Errorf("got %d %s, want %d %s: %s", r.Status, r.code(), c.status, c.code, r.Raw)
			}
		})
	}
	// Bad input changed nothing.
	if run := n.do("GET", v1+"/runs/"+rid, key, nil); run.Body["next_seq_id"].(float64) != 1 || run.str("status") != "created" {
		t.Errorf("refused requests changed the run: %s", run.Raw)
	}
}

func TestCancelAndClose(t *testing.T) {
	n := newNode(t)
	key := n.keys["acme"]
	sid, rid := n.session(key, "cancel")
	var ids []string
	for seq := 1; seq <= 6; seq++ {
		r := n.do("POST", v1+"/runs/"+rid+"/operations", key, op(seq, fmt.Sprint("k", seq), "forward_backward", batch(16, 60, seq)))
		n.want(r, 202, "")
		ids = append(ids, r.str("id"))
	}
	c := n.do("POST", v1+"/runs/"+rid+"/cancel", key, map[string]any{"request_id": "stop"})
	n.want(c, 202, "")
	n.poll(key, c.str("id"))
	if s := n.do("GET", v1+"/runs/"+rid, key, nil).str("status"); s != "cancelled" {
		t.Fatalf("run after cancel: %s", s)
	}
	cancelled := 0
	for _, id := range ids {
		r := n.poll(key, id)
		if r.str("status") == "cancelled" {
			cancelled++
		}
	}
	if cancelled == 0 {
		t.Errorf("no queued operation was cancelled")
	}
	n.want(n.do("POST", v1+"/runs/"+rid+"/operations", key, op(8, "late", "forward", batch(1, 4, 1))), 409, "run_not_accepting")
	cl := n.do("POST", v1+"/sessions/"+sid+"/close", key, map[string]any{"request_id": "c"})
	n.want(cl, 200, "")
	if cl.str("status") != "closed" {
		t.Errorf("session after close: %s", cl.Raw)
	}
	n.want(n.do("POST", v1+"/sessions/"+sid+"/heartbeat", key, map[string]any{"request_id": "h"}), 409, "session_not_ready")

	// Closing a session with live work cancels its run, then closes.
	sid2, rid2 := n.session(key, "close")
	n.want(n.do("POST", v1+"/runs/"+rid2+"/operations", key, op(1, "k", "forward_backward", batch(16, 60, 1))), 202, "")
	n.want(n.do("POST", v1+"/sessions/"+sid2+"/close", key, map[string]any{"request_id": "c"}), 200, "")
	deadline := time.Now().Add(30 * time.Second)
	for n.do("GET", v1+"/sessions/"+sid2, key, nil).str("status") != "closed" {
		if time.Now().After(deadline) {
			t.Fatal("session did not close")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s := n.do("GET", v1+"/runs/"+rid2, key, nil).str("status"); s != "cancelled" {
		t.Errorf("run of a closed session: %s", s)
	}
}

// TestMsgpack sends and reads the same shapes as msgpack: the request_hash
// is the JSON one, so a msgpack submission and its JSON retry are the same
// operation, and errors come back in the negotiated format too.
func TestMsgpack(t *testing.T) {
	n := newNode(t)
	key := n.keys["acme"]
	mp := []string{"Content-Type", "application/msgpack", "Accept", "application/msgpack"}
	encode := func(jsonBody []byte) []byte {
		var v any
		if err := json.Unmarshal(jsonBody, &v); err != nil {
			t.Fatal(err)
		}
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	s := n.do("POST", v1+"/sessions", key, encode([]byte(`{"request_id":"mp","idle_ttl_s":600}`)), mp...)
	n.want(s, 201, "")
	if s.Type != "application/msgpack" || s.str("status") != "ready" || s.Body["idle_ttl_s"].(float64) != 600 {
		t.Fatalf("msgpack session: %s %s", s.Type, s.Raw)
	}
	run := n.do("POST", v1+"/sessions/"+s.str("id")+"/runs", key, encode(fmt.Appendf(nil,
		`{"request_id":"r","base_model":"tiny","model_revision":%q,"lora":{"rank":4}}`, n.revision)), mp...)
	n.want(run, 201, "")
	path := v1 + "/runs/" + run.str("id") + "/operations"

	body := op(1, "k1", "forward_backward", batch(2, 6, 1))
	first := n.do("POST", path, key, encode(body), mp...)
	n.want(first, 202, "")
	retry := n.do("POST", path, key, body) // the same operation, as JSON
	n.want(retry, 202, "")
	if retry.Type != "application/json" || retry.str("id") != first.str("id") {
		t.Fatalf("JSON retry of a msgpack submission: %s vs %s", retry.Raw, first.Raw)
	}
	if done := n.poll(key, first.str("id")); done.str("status") != "succeeded" {
		t.Fatalf("msgpack operation: %s", done.Raw)
	}

	conflict := n.do("POST", path, key, encode(op(5, "k2", "forward", batch(1, 4, 1))), mp...)
	n.want(conflict, 409, "seq_id_mismatch")
	if conflict.Type != "application/msgpack" {
		t.Errorf("error answered as %s", conflict.Type)
	}
	n.want(n.do("POST", path, key, []byte{0xc4, 0x01, 0x00}, mp...), 400, "malformed_msgpack")
	n.want(n.do("POST", path, key, encode(body)[:20], mp...), 400, "malformed_msgpack")
	// JSON is the default; msgpack only where Accept prefers it.
	for accept, want := range map[string]string{
		"":    "application/json",
		"*/*": "application/json",
		"application/msgpack;q=0.5, application/json": "application/json",
		"application/json;q=0.1, application/msgpack": "application/msgpack",
		"application/x-msgpack":                       "application/msgpack",
		"text/html":                                   "application/json",
	} {
		r := n.do("GET", v1+"/runs/"+run.str("id"), key, nil, "Accept", accept)
		if r.Status != 200 || r.Type != want {
			t.Errorf("Accept %q answered %d %s, want %s", accept, r.Status, r.Type, want)
		}
	}
}

// checkUsage holds the flow's usage to provider_a's price list: a device
// time component for each operation the executor ran, pending (the node
// settles them ten minutes after they were observed; TestMoney sees them
// settle), so that the total is cost_pending.
func (n *node) checkUsage(sid, key string) {
	n.t.Helper()
	u := n.do("GET", v1+"/sessions/"+sid+"/usage", key, nil)
	n.want(u, 200, "")
	cost := n.do("GET", v1+"/sessions/"+sid+"/cost", key, nil)
	n.want(cost, 200, "")
	var sum float64
	items := u.Body["items"].([]any)
	for _, it := range items {
		c := it.(map[string]any)
		q := c["quantity"].(float64)
		if want := float64(int64((q*555_555 + 999_999) / 1_000_000)); c["meter"] != "device_ms" || c["microusd_per_million_units"] != 555_555.0 || c["cost_microusd"].(float64) != want || c["provider"] != "provider_a" || c["session_id"] != sid {
			n.t.Errorf("component %v: want device_ms at cost %v", c, want)
		}
		if c["settlement_status"] != "pending" || c["settled_at"] != nil {
			n.t.Errorf("provider_a's device time settled at once: %v", c)
		}
		sum += c["cost_microusd"].(float64)
	}
	if len(items) == 0 || cost.Body["estimated_max_microusd"].(float64) != sum || len(cost.Body["components"].([]any)) != len(items) {
		n.t.Errorf("cost %s does not add up to %v", cost.Raw, sum)
	}
	if cost.Body["total_microusd"] != "cost_pending" || cost.Body["settlement_status"] != "pending" {
		n.t.Errorf("cost: %s", cost.Raw)
	}
}

// A catalog model whose folder holds a tokenizer.json says so, and serves
// it; one without answers 404.
func TestTokenizer(t *testing.T) {
	n := newNode(t)
	key := n.keys["acme"]
	n.want(n.do("GET", v1+"/models/tiny/tokenizer", key, nil), 404, "not_found")
	n.want(n.do("GET", v1+"/models/nope/tokenizer", key, nil), 404, "not_found")
	tok, err := tokenizer.Generated(512)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := tok.JSON()
	if err != nil {
		t.Fatal(err)
	}
	n.stop()
	if err := os.WriteFile(filepath.Join(n.modelDir, "tokenizer.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	n.start()
	if m := n.do("GET", v1+"/models", key, nil); m.Body["items"].([]any)[0].(map[string]any)["tokenizer"] != true {
		t.Fatalf("the catalog: %s", m.Raw)
	}
	got := n.do("GET", v1+"/models/tiny/tokenizer", key, nil)
	n.want(got, 200, "")
	back, err := tokenizer.Parse(got.Raw)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := back.Encode("Hello"); err != nil || len(ids) == 0 {
		t.Fatalf("the served tokenizer: %v %v", ids, err)
	}
}
