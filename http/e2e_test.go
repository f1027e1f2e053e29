package httpapi_test

// Black-box tests: each starts the real wts binary on 127.0.0.1 with a tiny
// generated model and talks to it over HTTP only.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/wts-project/wts/bench/service"
	"github.com/wts-project/wts/http/jcs"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/providers"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wts-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "wts")
	if out, err := exec.Command("go", "build", "-o", binary, "../cmd/wts").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build wts: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// node is one server process with its data folder and keys.
type node struct {
	t        *testing.T
	data     string
	modelDir string
	base     string
	cmd      *exec.Cmd
	keys     map[string]string // name → key
	revision string
	extra    []string
	proc     *service.Process // the running server
	taken    []request        // the JSON bodies the server took (checkTaken)
}

// request is a request the server took.
type request struct {
	method, path string
	body         []byte
}

// checkTaken validates every JSON body the server took against its
// endpoint's documented request schema (checkRequest).
func (n *node) checkTaken() {
	for _, r := range n.taken {
		if err := checkRequest(r.method, r.path, r.body); err != nil {
			n.t.Errorf("%s %s took a body its documented schema refuses: %v\n%.2000s", r.method, r.path, err, r.body)
		}
	}
}

// newNode prepares a data folder with a tiny model and keys for two
// organizations (test and live keys for the first), each ledger with
// credit, then starts the server.
func newNode(t *testing.T, extra ...string) *node {
	t.Helper()
	return newNodeWith(t, "tiny", extra...)
}

// newNodeWith is newNode with the generated model of another preset, which
// the catalog serves as "tiny" all the same.
func newNodeWith(t *testing.T, preset string, extra ...string) *node {
	t.Helper()
	n := &node{t: t, data: t.TempDir(), keys: map[string]string{}, extra: extra}
	n.modelDir = filepath.Join(n.data, "tiny")
	if err := model.Generate(preset, 5, n.modelDir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	rev, err := providers.Revision(n.modelDir)
	if err != nil {
		t.Fatal(err)
	}
	n.revision = rev
	for name, args := range map[string][]string{"acme": {"--org", "acme"}, "acme-live": {"--org", "acme", "--live"}, "other": {"--org", "other"}} {
		out, err := exec.Command(binary, append([]string{"keys", "create", "--data", n.data}, args...)...).Output()
		if err != nil {
			t.Fatalf("keys create: %v", err)
		}
		n.keys[name] = strings.TrimSpace(string(out))
		// Credit enough that the tests' sessions, each reserving up to 100
		// USD, never meet the credit floor (money_test.go meets it).
		if out, err := exec.Command(binary, append([]string{"orgs", "credit", "--data", n.data, "--microusd", "1000000000000"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("orgs credit: %v\n%s", err, out)
		}
	}
	n.start()
	t.Cleanup(n.stop)
	t.Cleanup(n.checkTaken)
	return n
}

func (n *node) start() {
	n.t.Helper()
	// Grains passivate after 200 ms idle (10 minutes in service), so that the
	// whole suite also drives them back from the store between requests.
	args := []string{"serve", "--data", n.data, "--addr", "127.0.0.1:0", "--model", "tiny=" + n.modelDir, "--log-level", "warn", "--grain-idle", "200ms"}
	env := os.Environ()
	for _, x := range n.extra {
		if kv, ok := strings.CutPrefix(x, "env:"); ok { // an environment variable, not a flag
			env = append(env, kv)
		} else {
			args = append(args, x)
		}
	}
	n.cmd = exec.Command(binary, args...)
	n.cmd.Env = env
	p, err := service.Start(n.cmd)
	if err != nil {
		n.t.Fatal(err)
	}
	n.base, n.proc = "http://"+p.Addr, p
}

// stop shuts the server down as an operator would (SIGTERM) and checks it
// exited cleanly: a server built with -race (GOFLAGS=-race go test ./http)
// exits 66 when it saw a data race.
func (n *node) stop() {
	if n.cmd != nil && n.cmd.ProcessState == nil {
		n.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- n.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				n.t.Errorf("the server did not exit cleanly on SIGTERM: %v", err)
			}
		case <-time.After(30 * time.Second):
			n.cmd.Process.Kill()
			<-done
			n.t.Error("the server did not stop within 30 s of SIGTERM")
		}
	}
}

// kill stops the server the hard way: no drain, no cleanup.
func (n *node) kill() {
	n.cmd.Process.Signal(syscall.SIGKILL)
	n.cmd.Wait()
}

// reply is a response: status and decoded JSON body.
type reply struct {
	Status int
	Body   map[string]any
	Raw    []byte // JSON, also when the server answered in msgpack
	Type   string // the response's Content-Type
	Header http.Header
}

func (r *reply) code() string {
	e, _ := r.Body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (r *reply) str(k string) string { s, _ := r.Body[k].(string); return s }

func (n *node) do(method, path, key string, body any, headers ...string) *reply {
	n.t.Helper()
	var rd io.Reader
	var sent []byte
	switch b := body.(type) {
	case nil:
	case string:
		sent = []byte(b)
	case []byte:
		sent = b
	default:
		sent, _ = json.Marshal(b)
	}
	if sent != nil {
		rd = bytes.NewReader(sent)
	}
	req, err := http.NewRequest(method, n.base+path, rd)
	if err != nil {
		n.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Content-Type") == "application/msgpack" {
		var v any
		if err := msgpack.Unmarshal(raw, &v); err != nil {
			n.t.Fatalf("%s %s: body is not msgpack: %v", method, path, err)
		}
		raw, _ = json.Marshal(v)
	}
	r := &reply{Status: resp.StatusCode, Raw: raw, Type: resp.Header.Get("Content-Type"), Header: resp.Header}
	if err := checkContract(method, path, r.Status, raw); err != nil {
		n.t.Errorf("%s %s answered %d outside the OpenAPI document: %v\n%s", method, path, r.Status, err, raw)
	}
	// Checked at the end (validating takes time some tests' timing has not
	// got), bar the floods' megabyte batches (which would take seconds).
	if r.Status < 300 && len(sent) < 64<<10 && req.Header.Get("Content-Type") == "application/json" && sent != nil {
		n.taken = append(n.taken, request{method, path, sent})
	}
	if err := json.Unmarshal(raw, &r.Body); err != nil {
		n.t.Fatalf("%s %s: body is not a JSON object: %q", method, path, raw)
	}
	if resp.StatusCode >= 400 {
		checkEnvelope(n.t, r)
	}
	return r
}

// checkEnvelope holds every error body to the spec's envelope: error.code
// and error.message, optional request_id and funding_source, nothing else.
func checkEnvelope(t *testing.T, r *reply) {
	t.Helper()
	for k := range r.Body {
		if k != "error" && k != "request_id" && k != "funding_source" {
			t.Errorf("envelope has extra field %q: %s", k, r.Raw)
		}
	}
	e, ok := r.Body["error"].(map[string]any)
	if !ok || len(e) != 2 || e["code"] == "" || e["message"] == "" {
		t.Errorf("bad error envelope: %s", r.Raw)
	}
}

func (n *node) want(r *reply, status int, code string) {
	n.t.Helper()
	if r.Status != status || (code != "" && r.code() != code) {
		n.t.Fatalf("got %d %s, want %d %s: %s", r.Status, r.code(), status, code, r.Raw)
	}
}

// session creates a session and its run for key, returning their ids.
func (n *node) session(key, request string) (string, string) {
	n.t.Helper()
	s := n.do("POST", "/v1/training/sessions", key, map[string]any{"request_id": request})
	n.want(s, 201, "")
	r := n.do("POST", "/v1/training/sessions/"+s.str("id")+"/runs", key, map[string]any{
		"request_id": "run-" + request, "base_model": "tiny", "model_revision": n.revision, "lora": map[string]any{"rank": 4, "seed": 3}})
	n.want(r, 201, "")
	return s.str("id"), r.str("id")
}

// op builds an operation body with its correct request_hash.
func op(seq int, key, kind string, payload any) []byte {
	env, _ := json.Marshal(map[string]any{"seq_id": seq, "idempotency_key": key, "kind": kind, "payload": payload})
	canon, err := jcs.Canonical(env, "")
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(canon)
	var m map[string]any
	json.Unmarshal(env, &m)
	m["request_hash"] = hex.EncodeToString(sum[:])
	out, _ := json.Marshal(m)
	return out
}

// batch is a forward_backward payload of n sequences of length l.
func batch(n, l, seed int) map[string]any {
	var data []any
	for i := 0; i < n; i++ {
		toks := make([]int, l+1)
		for j := range toks {
			toks[j] = (seed*31 + i*7 + j*5) % 64
		}
		data = append(data, map[string]any{"model_input": map[string]any{"token_ids": toks[:l]}, "loss_fn_inputs": map[string]any{"target_tokens": toks[1:]}})
	}
	return map[string]any{"data": data, "loss_fn": "cross_entropy"}
}

var adam = map[string]any{"adam_params": map[string]any{"learning_rate": 0.01}}

// poll waits for an operation to end.
func (n *node) poll(key, id string) *reply {
	n.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		r := n.do("GET", "/v1/training/operations/"+id, key, nil)
		n.want(r, 200, "")
		switch r.str("status") {
		case "succeeded", "failed", "cancelled":
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
	n.t.Fatalf("operation %s did not end", id)
	return nil
}

// scrape reads /metrics (no key needed): each series' value, and the text.
func (n *node) scrape() (map[string]float64, []byte) {
	n.t.Helper()
	resp, err := http.Get(n.base + "/metrics")
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		n.t.Fatalf("/metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	got := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if i := strings.LastIndexByte(line, ' '); i > 0 && !strings.HasPrefix(line, "#") {
			var v float64
			fmt.Sscan(line[i+1:], &v)
			got[line[:i]] = v
		}
	}
	return got, raw
}

// checkPrometheus reads /metrics (no key needed) and checks the samples in
// want exactly and that the named series are present.
func (n *node) checkPrometheus(want map[string]float64, present ...string) {
	n.t.Helper()
	got, raw := n.scrape()
	for series, v := range want {
		if got[series] != v {
			n.t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
	for _, name := range present {
		if !strings.Contains(string(raw), "\n"+name) {
			n.t.Errorf("/metrics has no %s", name)
		}
	}
}
