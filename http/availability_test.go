package httpapi_test

// Availability: no request takes the node down, restarts keep training,
// one tenant's large work does not hold up another's, secrets stay out of
// logs and replies.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// params are sampling parameters for a sample payload.
func params(maxTokens int, temperature, minP float64) map[string]any {
	return map[string]any{"max_tokens": maxTokens, "temperature": temperature, "top_p": 1, "top_k": -1, "min_p": minP, "seed": 7}
}

// A temperature of 1e-320 with min_p once indexed -1 in the sampling
// executor and took the node down, again after every restart while it
// stayed queued. It is greedy now, on the run and on the sampler, and the
// operations queued behind it succeed.
func TestPoisonSample(t *testing.T) {
	n := newNode(t)
	key := n.keys["acme"]
	_, rid := n.session(key, "poison")
	prompt := map[string]any{"token_ids": []int{1, 5, 9}}
	poison := map[string]any{"prompt": prompt, "parameters": params(6, 1e-320, 0.5), "num_samples": 2}
	first := n.do("POST", v1+"/runs/"+rid+"/operations", key, op(1, "s1", "sample", poison))
	n.want(first, 202, "")
	r := n.poll(key, first.str("id"))
	if r.str("status") != "succeeded" {
		t.Fatalf("run-scoped sample: %s", r.Raw)
	}
	seqs := r.Body["result"].(map[string]any)["sequences"].([]any)
	if fmt.Sprint(seqs[0].(map[string]any)["tokens"]) != fmt.Sprint(seqs[1].(map[string]any)["tokens"]) {
		t.Errorf("a denormal temperature is greedy: both samples are the same, got %v", seqs)
	}
	sm := n.do("GET", v1+"/runs/"+rid, key, nil).str("sampler_id")
	var ids []string
	for i, p := range []map[string]any{params(6, 1e-320, 0.5), params(6, 1e-320, 1), params(6, 2, 1), params(6, 0.7, 0)} {
		s := n.do("POST", v1+"/samplers/"+sm+"/operations", key, op(i+1, fmt.Sprint("p", i), "sample",
			map[string]any{"prompt": prompt, "parameters": p, "num_samples": 3}))
		n.want(s, 202, "")
		ids = append(ids, s.str("id"))
	}
	for _, id := range ids {
		if r := n.poll(key, id); r.str("status") != "succeeded" {
			t.Errorf("sampler operation: %s", r.Raw)
		}
	}
	n.want(n.do("GET", "/healthz", "", nil), 200, "")
}

// An optim_step with learning_rate 1e308 was accepted, left NaN weights and
// reported succeeded. It fails now (non_finite_values) and changes
// nothing: the run is poisoned, and the last weights it saved are finite.
func TestNonFiniteStep(t *testing.T) {
	n := newNode(t)
	key := n.keys["acme"]
	_, rid := n.session(key, "nan")
	path := v1 + "/runs/" + rid + "/operations"
	n.want(n.do("POST", path, key, op(1, "k1", "forward_backward", batch(2, 9, 1))), 202, "")
	huge := n.do("POST", path, key, op(2, "k2", "optim_step", map[string]any{"adam_params": map[string]any{"learning_rate": 1e308}}))
	n.want(huge, 202, "")
	step := n.poll(key, huge.str("id"))
	if step.str("status") != "failed" || step.str("error_code") != "non_finite_values" {
		t.Fatalf("optim_step with learning_rate 1e308: %s", step.Raw)
	}
	if run := n.do("GET", v1+"/runs/"+rid, key, nil); run.str("status") != "poisoned" || run.str("error_code") != "non_finite_values" {
		t.Errorf("run: %s", run.Raw)
	}
	n.want(n.do("POST", path, key, op(3, "k3", "forward", batch(1, 4, 1))), 409, "run_not_accepting")
}

// trainingQueue submits pairs of forward_backward (datums × 60 tokens)
// and optim_step to a run and returns their ids in seq order.
func (n *node) trainingQueue(key, rid string, pairs, datums, seed int) []string {
	n.t.Helper()
	var ids []string
	for seq := 1; seq <= 2*pairs; seq++ {
		kind, p := "forward_backward", any(batch(datums, 60, seed+seq))
		if seq%2 == 0 {
			kind, p = "optim_step", adam
		}
		r := n.do("POST", v1+"/runs/"+rid+"/operations", key, op(seq, fmt.Sprint("k", seq), kind, p))
		n.want(r, 202, "")
		ids = append(ids, r.str("id"))
	}
	return ids
}

// trainingRuns makes runs runs, each with a training queue of pairs, and
// returns their ids and their operations' ids.
func (n *node) trainingRuns(key, name string, runs, pairs, seed int) ([]string, [][]string) {
	n.t.Helper()
	rids, ids := make([]string, runs), make([][]string, runs)
	for i := range runs {
		_, rids[i] = n.session(key, fmt.Sprint(name, i))
		ids[i] = n.trainingQueue(key, rids[i], pairs, 64, seed)
	}
	return rids, ids
}

// results is each operation's status and loss:sum (grad_norm for a step),
// once all have ended.
func (n *node) results(key string, ids []string) []string {
	n.t.Helper()
	var out []string
	for _, id := range ids {
		r := n.poll(key, id)
		m := map[string]any{}
		if res, ok := r.Body["result"].(map[string]any); ok {
			m, _ = res["metrics"].(map[string]any)
		}
		out = append(out, fmt.Sprint(r.str("status"), r.str("error_code"), m["loss:sum"], m["grad_norm"]))
	}
	return out
}

// waitExecuting waits until an operation of one of the runs is executing,
// and reports whether it saw one before they had all ended.
func (n *node) waitExecuting(key string, rids ...string) bool {
	n.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		live := false
		for _, rid := range rids {
			for _, o := range n.do("GET", v1+"/runs/"+rid+"/operations", key, nil).Body["items"].([]any) {
				switch o.(map[string]any)["status"] {
				case "executing":
					return true
				case "pending":
					live = true
				}
			}
		}
		if !live {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	n.t.Fatal("no operation started")
	return false
}

// Kill the node (kill -9) with many runs' work queued and one operation on
// the device: no run is interrupted, every acknowledged operation runs
// after the restart (the one cut short again, on the trainer rebuilt from
// snapshot and replay), and the results are the ones a run that was never
// killed gets for the same operations.
func TestKillRestart(t *testing.T) {
	n := newNode(t)
	key := n.keys["acme"]
	const runs, pairs = 5, 4
	rids, ids := n.trainingRuns(key, "kill", runs, pairs, 10)
	if !n.waitExecuting(key, rids...) {
		t.Fatal("every operation ended before the kill")
	}
	before := n.do("GET", v1+"/runs/"+rids[0]+"/operations", key, nil).Body["items"].([]any)
	n.kill()
	n.start()
	for i := range runs {
		after := n.do("GET", v1+"/runs/"+rids[i]+"/operations", key, nil).Body["items"].([]any)
		if len(after) != 2*pairs {
			t.Fatalf("run %d: %d operations after the restart, %d acknowledged", i, len(after), 2*pairs)
		}
		for j, o := range after {
			if o.(map[string]any)["id"] != ids[i][j] {
				t.Fatalf("run %d operation %d changed id", i, j+1)
			}
		}
	}
	for j, o := range before {
		if b := o.(map[string]any); b["status"] == "succeeded" {
			if a := n.do("GET", v1+"/operations/"+ids[0][j], key, nil); fmt.Sprint(a.Body) != fmt.Sprint(b) {
				t.Errorf("ended operation %d changed across the restart:\n%v\n%v", j+1, b, a.Body)
			}
		}
	}
	_, control := n.session(key, "control")
	want := n.results(key, n.trainingQueue(key, control, pairs, 64, 10))
	for i := range runs {
		if got := n.results(key, ids[i]); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("run %d after the kill:\n%v\nwant (never killed):\n%v", i, got, want)
		}
		if s := n.do("GET", v1+"/runs/"+rids[i], key, nil).str("status"); s != "running" {
			t.Errorf("run %d is %s after the restart", i, s)
		}
	}
}

// SIGTERM under load: the node stops accepting, lets the operation on the
// device finish (or cuts it at --drain and records it pending), keeps the
// queues on disk, releases the store and exits; after the restart every
// operation runs and no run is interrupted.
func TestSigtermKeepsQueues(t *testing.T) {
	n := newNode(t, "--drain", "300ms")
	key := n.keys["acme"]
	const runs, pairs = 6, 3
	rids, ids := n.trainingRuns(key, "term", runs, pairs, 20)
	n.waitExecuting(key, rids...)
	start := time.Now()
	n.stop()
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("stopping took %v with --drain 300ms", took)
	}
	n.start()
	for i := range runs {
		for j, res := range n.results(key, ids[i]) {
			if !strings.HasPrefix(res, "succeeded") {
				t.Errorf("run %d operation %d after SIGTERM and restart: %s", i, j+1, res)
			}
		}
		if s := n.do("GET", v1+"/runs/"+rids[i], key, nil).str("status"); s != "running" {
			t.Errorf("run %d is %s", i, s)
		}
	}
}

// One tenant's forward of 128 micro-batches does not hold up another's
// 3-token forward: the executor takes turns between organizations at each
// micro-batch.
func TestTenantsTakeTurns(t *testing.T) {
	n := newNode(t)
	big, small := n.keys["acme"], n.keys["other"]
	_, bigRun := n.session(big, "big")
	_, smallRun := n.session(small, "small")
	large := n.do("POST", v1+"/runs/"+bigRun+"/operations", big, op(1, "big", "forward", batch(4096, 127, 1)))
	n.want(large, 202, "")
	n.waitExecuting(big, bigRun)
	sent := time.Now()
	tiny := n.do("POST", v1+"/runs/"+smallRun+"/operations", small, op(1, "tiny", "forward", batch(1, 3, 1)))
	n.want(tiny, 202, "")
	if r := n.poll(small, tiny.str("id")); r.str("status") != "succeeded" {
		t.Fatalf("small forward: %s", r.Raw)
	}
	waited := time.Since(sent)
	if r := n.do("GET", v1+"/operations/"+large.str("id"), big, nil); r.str("status") != "executing" {
		t.Errorf("the large forward ended before the small one (%s): they did not take turns", r.str("status"))
	}
	n.poll(big, large.str("id"))
	t.Logf("the 3-token forward took %v beside the large one", waited)
}

// A request with a valid key and a malformed header is answered with the
// error envelope and its request_id; neither the reply nor the log holds
// the key. The bearer scheme is case-insensitive (RFC 7235).
func TestSecretsStayOut(t *testing.T) {
	n := newNode(t, "--max-body", "1048576")
	key := n.keys["acme"]
	u, _ := url.Parse(n.base)
	for _, bad := range []string{"Bad Header\r\n", "Content-Length: x\r\n", "X-Thing: \x01\x02\r\n"} {
		reply := rawRequest(t, u.Host, fmt.Sprintf("POST /v1/training/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n%sContent-Length: 2\r\n\r\n{}", key, bad))
		if !strings.HasPrefix(reply, "HTTP/1.1 400") || !strings.Contains(reply, `"code":"bad_request"`) || !strings.Contains(reply, `"request_id":"req_`) {
			t.Errorf("malformed %q: %s", bad, reply)
		}
		if strings.Contains(reply, key[9:]) {
			t.Errorf("the reply to a malformed %q holds the key: %s", bad, reply)
		}
	}
	// A body past --max-body, announced by its Content-Length: refused
	// before it is read, as the envelope with its request_id.
	if reply := rawRequest(t, u.Host, fmt.Sprintf("POST /v1/training/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", key, 2<<20)); !strings.HasPrefix(reply, "HTTP/1.1 413") || !strings.Contains(reply, `"code":"payload_too_large"`) || !strings.Contains(reply, `"request_id":"req_`) {
		t.Errorf("413: %s", reply)
	}
	n.want(n.do("GET", v1+"/sessions/wts_00000000000000000000000000000000", "", nil, "Authorization", "bearer "+key), 404, "not_found")
	n.want(n.do("GET", v1+"/sessions/wts_00000000000000000000000000000000", "", nil, "Authorization", "BEARER "+key), 404, "not_found")
	n.proc.Stop()
	n.cmd.Wait()
	if log := n.proc.Log(); strings.Contains(log, key[9:]) || !strings.Contains(log, "unreadable request") {
		t.Errorf("the log holds the key, or not the refused requests:\n%s", log)
	}
}

// rawRequest sends raw bytes to addr and returns all it answers.
func rawRequest(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, raw)
	b, _ := io.ReadAll(bufio.NewReader(c))
	return string(b)
}

// With --drain 1s, a long sample (64 samples of up to 4,000 tokens on the
// small model) is cut at the deadline and the node exits; the operation
// goes back to pending and runs again after the restart, and a run cancel
// stops its decoding at the next step.
func TestDrainCutsLongSample(t *testing.T) {
	if testing.Short() {
		t.Skip("generates the small model")
	}
	n := newNodeWith(t, "small", "--drain", "1s")
	key := n.keys["acme"]
	_, rid := n.session(key, "long")
	long := map[string]any{"prompt": map[string]any{"token_ids": []int{1, 5, 9}}, "parameters": params(4000, 1, 0), "num_samples": 64}
	s := n.do("POST", v1+"/runs/"+rid+"/operations", key, op(1, "long", "sample", long))
	n.want(s, 202, "")
	n.waitExecuting(key, rid)
	time.Sleep(500 * time.Millisecond) // decoding
	start := time.Now()
	n.cmd.Process.Signal(syscall.SIGTERM)
	n.cmd.Wait()
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("the node took %v to stop with --drain 1s", took)
	}
	n.start()
	if r := n.do("GET", v1+"/operations/"+s.str("id"), key, nil); r.str("status") != "pending" && r.str("status") != "executing" {
		t.Fatalf("the cut sample after the restart: %s", r.Raw)
	}
	n.waitExecuting(key, rid)
	time.Sleep(500 * time.Millisecond)
	cancelled := time.Now()
	n.want(n.do("POST", v1+"/runs/"+rid+"/cancel", key, map[string]any{"request_id": "c"}), 202, "")
	r := n.poll(key, s.str("id"))
	if r.str("status") != "cancelled" {
		t.Errorf("the sample after the run's cancel: %s", r.Raw)
	}
	if took := time.Since(cancelled); took > 5*time.Second {
		t.Errorf("the cancel took %v to reach the decoding", took)
	}
}

// rss is the server's resident memory in bytes (Linux).
func (n *node) rss() int64 {
	n.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.cmd.Process.Pid))
	if err != nil {
		n.t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	n.t.Fatal("no VmRSS")
	return 0
}

// A flood of submissions is answered 429 queue_full with Retry-After once a
// run's, the organization's or the node's queue is full, with nothing
// written and the node's memory flat; a refused submission retried as it
// was is taken once the queue has room. Live sessions per organization are
// bounded too.
func TestFloodIsBounded(t *testing.T) {
	// GOGC 50: the heap stays close to what is live, so what the refused
	// submissions leave behind would show in the resident memory.
	n := newNode(t, "--max-queue-run", "40", "--max-queue-org", "100", "--max-queue-node", "130", "--max-live-sessions", "3", "env:GOGC=50")
	key, other := n.keys["acme"], n.keys["other"]
	body := func(seq int) []byte { return op(seq, fmt.Sprint("k", seq), "forward", batch(1, 4, seq)) }
	// fill gives a run a long forward to work on, then submits small ones
	// behind it until one is refused, and returns the refusal and the
	// seq_id refused.
	fill := func(key, request string) (string, *reply, int) {
		_, rid := n.session(key, request)
		n.want(n.do("POST", v1+"/runs/"+rid+"/operations", key, op(1, "long", "forward", batch(4096, 127, 1))), 202, "")
		for seq := 2; ; seq++ {
			r := n.do("POST", v1+"/runs/"+rid+"/operations", key, body(seq))
			if r.Status != 202 {
				return rid, r, seq
			}
		}
	}
	run1, refused, seq := fill(key, "flood1")
	n.want(refused, 429, "queue_full")
	if refused.str("request_id") == "" || refused.Header.Get("Retry-After") != "1" {
		t.Errorf("429 without request_id or Retry-After: %s", refused.Raw)
	}
	fill(key, "flood2")
	_, r, _ := fill(key, "flood3") // the organization's 100
	n.want(r, 429, "queue_full")
	if !strings.Contains(string(r.Raw), "organization") {
		t.Errorf("org limit: %s", r.Raw)
	}
	_, r, _ = fill(other, "flood-other") // the node's 130
	n.want(r, 429, "queue_full")
	if !strings.Contains(string(r.Raw), "node") {
		t.Errorf("node limit: %s", r.Raw)
	}
	n.want(n.do("POST", v1+"/sessions", key, map[string]any{"request_id": "flood4"}), 429, "limit_exceeded")
	n.want(n.do("POST", v1+"/sessions", key, map[string]any{"request_id": "flood1"}), 200, "") // an idempotent repeat still answers

	// Refused submissions hold nothing: the node's backlog stays at its
	// bound, and after a first second of them has brought the heap to its
	// working size, a second one does not grow it.
	flood := 0
	burst := func() bool {
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); flood++ {
			switch r := n.do("POST", v1+"/runs/"+run1+"/operations", key, body(seq)); r.Status {
			case 202:
				seq++ // the queue made room already
				return false
			case 429:
			default:
				t.Fatalf("flood: %d %s", r.Status, r.Raw)
			}
		}
		return true
	}
	if burst() {
		before := n.rss()
		if burst() {
			if grew := n.rss() - before; grew > 96<<20 {
				t.Errorf("memory grew by %d MiB over a second of refused submissions", grew>>20)
			}
		}
	}
	if m, _ := n.scrape(); m["wts_operations_queued"] > 130 {
		t.Errorf("%v operations queued, past the node's bound of 130", m["wts_operations_queued"])
	}
	// The refused seq_id, retried as it was, is taken once there is room.
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := n.do("POST", v1+"/runs/"+run1+"/operations", key, body(seq))
		if r.Status == 202 {
			if r.Body["seq_id"].(float64) != float64(seq) {
				t.Fatalf("retry: %s", r.Raw)
			}
			break
		}
		if r.Status != 429 || time.Now().After(deadline) {
			t.Fatalf("retry of seq %d: %d %s", seq, r.Status, r.Raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d refused submissions in the flood", flood)
}

// Under a memory budget that holds two trainers, four runs that train in
// turns evict each other's trainers (to a snapshot) and rebuild them, with
// the results of a node that never evicts; a run or a request that could
// never fit is refused when it is made (capacity_exceeded).
func TestMemoryBudget(t *testing.T) {
	// The tiny model's rank-4 trainer takes 35 KiB: a 300 KB budget leaves
	// ~100 KiB beside the weights (GOMEMLIMIT is set apart, or the
	// collector would run all the time).
	n := newNode(t, "--memory-budget", "300000", "env:GOMEMLIMIT=4GiB", "--log-level", "info")
	free := newNode(t)
	key := n.keys["acme"]
	const runs, rounds = 4, 3
	var got [runs][]string
	rids := make([]string, runs)
	for i := range rids {
		_, rids[i] = n.session(key, fmt.Sprint("mem", i))
	}
	_, control := free.session(free.keys["acme"], "control")
	var want []string
	for round := range rounds {
		for i, rid := range rids {
			for k, o := range []struct {
				kind    string
				payload any
			}{{"forward_backward", batch(4, 30, round)}, {"optim_step", adam}} {
				seq := 2*round + k + 1
				r := n.do("POST", v1+"/runs/"+rid+"/operations", key, op(seq, fmt.Sprint("k", seq), o.kind, o.payload))
				n.want(r, 202, "")
				got[i] = append(got[i], n.results(key, []string{r.str("id")})...)
				if i == 0 {
					c := free.do("POST", v1+"/runs/"+control+"/operations", free.keys["acme"], op(seq, fmt.Sprint("k", seq), o.kind, o.payload))
					want = append(want, free.results(free.keys["acme"], []string{c.str("id")})...)
				}
			}
		}
	}
	for i := range runs {
		if fmt.Sprint(got[i]) != fmt.Sprint(want) {
			t.Errorf("run %d under the budget:\n%v\nwant (never evicted):\n%v", i, got[i], want)
		}
	}
	if log := n.proc.Log(); !strings.Contains(log, "trainer evicted") || !strings.Contains(log, "trainer rebuilt") {
		t.Error("no trainer was evicted and rebuilt under the budget")
	}

	s := n.do("POST", v1+"/sessions", key, map[string]any{"request_id": "big"})
	big := n.do("POST", v1+"/sessions/"+s.str("id")+"/runs", key, map[string]any{
		"request_id": "big", "base_model": "tiny", "model_revision": n.revision, "lora": map[string]any{"rank": 64, "train_mlp": true, "train_attn": true}})
	n.want(big, 422, "capacity_exceeded")
	sample := map[string]any{"prompt": map[string]any{"token_ids": []int{1, 2, 3}}, "parameters": params(100, 1, 0), "num_samples": 64}
	n.want(n.do("POST", v1+"/runs/"+rids[0]+"/operations", key, op(2*rounds+1, "s", "sample", sample)), 422, "capacity_exceeded")
	sample["num_samples"], sample["parameters"] = 2, params(8, 1, 0)
	ok := n.do("POST", v1+"/runs/"+rids[0]+"/operations", key, op(2*rounds+1, "s2", "sample", sample))
	n.want(ok, 202, "")
	if r := n.poll(key, ok.str("id")); r.str("status") != "succeeded" {
		t.Errorf("a sample that fits: %s", r.Raw)
	}
}

// A sampler operation's cancel stops its decoding at the next step; a
// queued one is cancelled at once; a run's operation is cancelled only
// with its run.
func TestCancelSamplerOperation(t *testing.T) {
	if testing.Short() {
		t.Skip("generates the small model")
	}
	n := newNodeWith(t, "small")
	key := n.keys["acme"]
	_, rid := n.session(key, "cancel")
	w := n.do("POST", v1+"/runs/"+rid+"/operations", key, op(1, "w", "save_weights_for_sampler", map[string]any{}))
	n.want(w, 202, "")
	n.poll(key, w.str("id"))
	sm := n.do("GET", v1+"/runs/"+rid, key, nil).str("sampler_id")
	long := map[string]any{"prompt": map[string]any{"token_ids": []int{1, 5, 9}}, "parameters": params(4000, 1, 0), "num_samples": 64}
	first := n.do("POST", v1+"/samplers/"+sm+"/operations", key, op(1, "a", "sample", long))
	second := n.do("POST", v1+"/samplers/"+sm+"/operations", key, op(2, "b", "sample", long))
	n.want(first, 202, "")
	n.want(second, 202, "")
	deadline := time.Now().Add(30 * time.Second)
	for n.do("GET", v1+"/operations/"+first.str("id"), key, nil).str("status") != "executing" {
		if time.Now().After(deadline) {
			t.Fatal("the sample did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	queued := n.do("POST", v1+"/operations/"+second.str("id")+"/cancel", key, map[string]any{"request_id": "c2"})
	n.want(queued, 202, "")
	if queued.str("status") != "cancelled" {
		t.Errorf("a queued sample's cancel: %s", queued.Raw)
	}
	cancelled := time.Now()
	n.want(n.do("POST", v1+"/operations/"+first.str("id")+"/cancel", key, map[string]any{"request_id": "c1"}), 202, "")
	if r := n.poll(key, first.str("id")); r.str("status") != "cancelled" {
		t.Errorf("an executing sample's cancel: %s", r.Raw)
	}
	if took := time.Since(cancelled); took > 5*time.Second {
		t.Errorf("the cancel took %v to stop the decoding", took)
	}
	n.want(n.do("POST", v1+"/operations/"+w.str("id")+"/cancel", key, map[string]any{"request_id": "c3"}), 409, "state_conflict")
}
