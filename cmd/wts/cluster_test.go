package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wts-project/wts/bench/service"
	"github.com/wts-project/wts/cluster"
	httpapi "github.com/wts-project/wts/http"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/providers"
)

// TestMain lets the test binary be `wts` itself (WTS_MAIN=1), so that the
// cluster test starts real nodes without building one.
func TestMain(m *testing.M) {
	if os.Getenv("WTS_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type node struct {
	*service.Node
	dead bool
}

func startNode(t *testing.T, data, modelDir string, join ...string) *node {
	t.Helper()
	return startNodeWith(t, data, modelDir, join)
}

// startNodeWith starts a node with more flags.
func startNodeWith(t *testing.T, data, modelDir string, join []string, flags ...string) *node {
	t.Helper()
	self := func(args ...string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "WTS_MAIN=1")
		return cmd
	}
	n, err := service.StartNode(self, data, join, append([]string{"--model", "tiny=" + modelDir, "--log-level", "debug", "--memory-budget", strconv.Itoa(2 << 30)}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &node{Node: n}
}

// spreader calls the API of whichever node answers.
type spreader struct {
	key   string
	nodes []*node
	mu    sync.Mutex
	http  http.Client
}

// call sends a request to node i (or, when it cannot answer, to the next
// live one) until an answer other than 503 comes, and returns its status
// and body.
func (c *spreader) call(t *testing.T, i int, method, path string, body []byte) (int, map[string]any) {
	deadline := time.Now().Add(90 * time.Second)
	for ; time.Now().Before(deadline); i++ {
		c.mu.Lock()
		n := c.nodes[i%len(c.nodes)]
		dead := n.dead
		c.mu.Unlock()
		if dead {
			continue
		}
		req, _ := http.NewRequest(method, "http://"+n.Addr+"/v1/training"+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+c.key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.http.Do(req)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		return resp.StatusCode, out
	}
	t.Errorf("%s %s: no node answered in time", method, path)
	return 0, nil
}

// testCluster is nodes of one cluster on one shared data folder, and a
// client that spreads its calls over them.
type testCluster struct {
	data, modelDir, rev string
	nodes               []*node
	c                   *spreader
}

// newTestCluster starts n nodes (stopped, and their warnings shown if the
// test failed, when it ends); all but the first listen on every interface
// (--bind 0.0.0.0) and advertise 127.0.0.1.
func newTestCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	tc := &testCluster{data: t.TempDir()}
	tc.modelDir = filepath.Join(tc.data, "tiny")
	if err := model.Generate("tiny", 1, tc.modelDir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	var err error
	if tc.rev, err = providers.Revision(tc.modelDir); err != nil {
		t.Fatal(err)
	}
	first := startNode(t, tc.data, tc.modelDir)
	tc.nodes = []*node{first}
	t.Cleanup(func() {
		var stopping sync.WaitGroup // together: the last voters would wait for a quorum
		for _, n := range tc.nodes {
			if !n.dead {
				stopping.Add(1)
				go func() { defer stopping.Done(); n.Stop() }()
			}
		}
		stopping.Wait()
		for _, n := range tc.nodes {
			if t.Failed() {
				for _, line := range strings.Split(n.Log(), "\n") {
					if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, `"level":"WARN"`) {
						t.Logf("%s: %s", n.Name, line)
					}
				}
			}
		}
	})
	for range n - 1 { // listening on every interface, reached at 127.0.0.1
		tc.nodes = append(tc.nodes, startNodeWith(t, tc.data, tc.modelDir, []string{first.Gossip}, "--bind", "0.0.0.0"))
	}
	key := first.FirstKey()
	if key == "" {
		t.Fatalf("no first key in the log:\n%s", first.Log())
	}
	// Each of the tests' sessions reserves up to 100 USD.
	var ledger httpapi.OrgReply
	if _, err := adminCall(tc.data, first.Name, "/admin/orgs/credit", httpapi.OrgRequest{Org: "default", MicroUSD: 1e12}, &ledger); err != nil {
		t.Fatalf("credit: %v", err)
	}
	tc.c = &spreader{key: key, nodes: tc.nodes, http: http.Client{Timeout: 60 * time.Second}}
	return tc
}

// createRuns makes n runs, each in its own session (request ids tagged).
func (tc *testCluster) createRuns(t *testing.T, n int, tag string) []string {
	ids := make([]string, n)
	for r := range ids {
		_, s := tc.c.call(t, r, "POST", "/sessions", []byte(fmt.Sprintf(`{"request_id":"%s%d"}`, tag, r)))
		code, run := tc.c.call(t, r+1, "POST", "/sessions/"+s["id"].(string)+"/runs",
			[]byte(fmt.Sprintf(`{"request_id":"r","base_model":"tiny","model_revision":%q,"lora":{"rank":4}}`, tc.rev)))
		if code != 201 {
			t.Fatalf("create run: %d %v", code, run)
		}
		ids[r] = run["id"].(string)
	}
	return ids
}

var batch = map[string]any{"data": []any{map[string]any{"model_input": map[string]any{"token_ids": []int{1, 17, 42, 9, 7, 3, 5, 8}},
	"loss_fn_inputs": map[string]any{"target_tokens": []int{17, 42, 9, 7, 3, 5, 8, 2}}}}}

// train sends every run pairs of forward_backward and optim_step, each
// operation to the nodes in turn; once every run has sent faultAfter
// pairs, fault runs, and then the rest go. It returns the operation ids
// acknowledged, by run.
func (tc *testCluster) train(t *testing.T, ids []string, pairs, faultAfter int, fault func()) [][]string {
	acked := make([][]string, len(ids))
	var progress sync.WaitGroup
	progress.Add(len(ids))
	faulted := make(chan struct{})
	var wg sync.WaitGroup
	for r := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range pairs {
				if i == faultAfter {
					progress.Done()
					<-faulted
				}
				for k, op := range []struct {
					kind    string
					payload any
				}{{"forward_backward", batch}, {"optim_step", map[string]any{"adam_params": map[string]any{"learning_rate": 1e-2}}}} {
					seq := 2*i + k + 1
					body := service.Operation(seq, "k"+strconv.Itoa(seq), op.kind, op.payload)
					code, out := tc.c.call(t, seq, "POST", "/runs/"+ids[r]+"/operations", body)
					if code != 202 && code != 200 {
						t.Errorf("run %d seq %d: %d %v", r, seq, code, out)
						return
					}
					acked[r] = append(acked[r], out["id"].(string))
				}
			}
		}()
	}
	progress.Wait()
	fault()
	close(faulted)
	wg.Wait()
	return acked
}

// runHost is a node that hosts a run grain.
func (tc *testCluster) runHost(t *testing.T) int {
	for i, n := range tc.nodes {
		var reply httpapi.NodeReply
		if _, err := adminCall(tc.data, n.Name, "/admin/node", nil, &reply); err == nil && reply.Grains["run"] > 0 {
			return i
		}
	}
	t.Fatal("no node hosts a run")
	return -1
}

// setDead tells the client whether node i can answer.
func (tc *testCluster) setDead(i int, dead bool) {
	tc.c.mu.Lock()
	tc.nodes[i].dead = dead
	tc.c.mu.Unlock()
}

// checkRuns waits for every acknowledged operation to end and checks that
// each succeeded, in seq_id order, the optimizer's step numbers counting
// 1, 2, 3, ... (no optim_step applied twice), and every run still
// running.
func (tc *testCluster) checkRuns(t *testing.T, ids []string, acked [][]string) {
	for r, id := range ids {
		var items []any
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			_, page := tc.c.call(t, r, "GET", "/runs/"+id+"/operations?after_seq=0&limit=500", nil)
			items = page["items"].([]any)
			settled := len(items) == len(acked[r])
			for _, it := range items {
				st := it.(map[string]any)["status"]
				settled = settled && (st == "succeeded" || st == "failed" || st == "cancelled")
			}
			if settled {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %d not settled in 90 s: %v", r, items)
			}
		}
		step := 0.0
		for i, it := range items {
			op := it.(map[string]any)
			if op["id"] != acked[r][i] || op["seq_id"].(float64) != float64(i+1) || op["status"] != "succeeded" {
				t.Fatalf("run %d op %d: %v (acknowledged %s)", r, i+1, op, acked[r][i])
			}
			if op["kind"] == "optim_step" {
				if step++; op["result"].(map[string]any)["metrics"].(map[string]any)["step"].(float64) != step {
					t.Fatalf("run %d: optim_step seq %v took step %v, the %vth", r, op["seq_id"], op["result"], step)
				}
			}
		}
		if _, run := tc.c.call(t, r, "GET", "/runs/"+id, nil); run["status"] != "running" {
			t.Fatalf("run %d: %v", r, run)
		}
	}
}

// checkAudit reads the executors' audit lines: no operation ran twice
// under one activation of its run, and at least want ran.
func (tc *testCluster) checkAudit(t *testing.T, want int) {
	ran := map[string]int{}
	audit := regexp.MustCompile(`"msg":"executed","run":"([^"]+)","seq":(\d+),"epoch":(\d+)`)
	for _, n := range tc.nodes {
		for _, m := range audit.FindAllStringSubmatch(n.Log(), -1) {
			k := strings.Join(m[1:], "/")
			if ran[k]++; ran[k] > 1 {
				t.Fatalf("executed twice in one activation: %s", k)
			}
		}
	}
	if len(ran) < want {
		t.Fatalf("audit lines for %d executions, want at least %d", len(ran), want)
	}
}

// The cluster tests train runs of pairs (forward_backward, optim_step).
const runs, pairs = 3, 8

// trainingCluster starts three nodes, with runs to train.
func trainingCluster(t *testing.T) (*testCluster, []string) {
	if testing.Short() {
		t.Skip("starts three nodes")
	}
	tc := newTestCluster(t, 3)
	return tc, tc.createRuns(t, runs, "s")
}

// Three nodes on one shared data folder train three runs, each run's
// operations sent to all three in turn; the node hosting a run is killed
// (SIGKILL) mid-training. Every acknowledged operation then ends
// succeeded, in seq_id order, each optim_step applied once (the optimizer's
// step numbers count 1, 2, 3, ...), no executor ran an operation twice
// for one activation of its run (the executors' audit lines), and every
// run goes on running. Then a fourth node joins, and new runs are placed
// on it.
func TestClusterSurvivesAKilledNode(t *testing.T) {
	tc, ids := trainingCluster(t)
	var killed time.Time
	var victim *node
	acked := tc.train(t, ids, pairs, 3, func() {
		i := tc.runHost(t)
		tc.setDead(i, true)
		victim = tc.nodes[i]
		victim.Kill()
		killed = time.Now()
	})
	tc.checkRuns(t, ids, acked)
	t.Logf("every run settled %v after the kill", time.Since(killed).Round(time.Millisecond))
	tc.checkAudit(t, runs*pairs*2)

	// A fourth node joins (a client of the store: it has its three
	// voters, one of them down), and new runs are placed on it too.
	fourth := tc.join(t)
	t.Logf("a fourth node joined %v after the kill", time.Since(killed).Round(time.Millisecond))
	if !strings.Contains(fourth.Log(), `"voter":false`) {
		t.Error("the fourth node became a voter")
	}
	for r, id := range tc.createRuns(t, 24, "late") {
		if code, out := tc.c.call(t, r, "POST", "/runs/"+id+"/operations", service.Operation(1, "k1", "forward", batch)); code != 202 {
			t.Fatalf("a run after the join: %d %v", code, out)
		}
	}
	t.Logf("24 runs made %v after the kill", time.Since(killed).Round(time.Millisecond))
	var reply httpapi.NodeReply
	if _, err := adminCall(tc.data, fourth.Name, "/admin/node", nil, &reply); err != nil || reply.Grains["run"] == 0 {
		t.Fatalf("no run placed on the node that joined: %v %v", reply.Grains, err)
	}
	t.Logf("the node that joined hosts %d of 24 new runs", reply.Grains["run"])

	// A node for samplers alone joins: samplers go there, none elsewhere.
	sampling := tc.join(t, "--role", "sample")
	for r, id := range ids {
		code, out := tc.c.call(t, r, "POST", "/runs/"+id+"/operations", service.Operation(2*pairs+1, "w", "save_weights_for_sampler", map[string]any{}))
		if code != 202 {
			t.Fatalf("save_weights_for_sampler: %d %v", code, out)
		}
		op := tc.wait(t, out["id"].(string))
		sid := op["result"].(map[string]any)["sampler_id"].(string)
		sample := map[string]any{"prompt": map[string]any{"token_ids": []int{1, 2, 3}}, "num_samples": 1,
			"parameters": map[string]any{"max_tokens": 4, "temperature": 1, "top_p": 1, "top_k": -1, "seed": 1}}
		if code, out = tc.c.call(t, r, "POST", "/samplers/"+sid+"/operations", service.Operation(1, "s", "sample", sample)); code != 202 {
			t.Fatalf("sample: %d %v", code, out)
		}
		if op := tc.wait(t, out["id"].(string)); op["status"] != "succeeded" {
			t.Fatalf("sample: %v", op)
		}
	}
	for _, n := range tc.nodes {
		if n.dead {
			continue
		}
		var reply httpapi.NodeReply
		if _, err := adminCall(tc.data, n.Name, "/admin/node", nil, &reply); err != nil {
			t.Fatal(err)
		}
		if got := reply.Grains["sampler"]; (n == sampling) != (got == len(ids)) || n != sampling && got != 0 {
			t.Errorf("node %s (the sample node: %v) hosts %d samplers", n.Name, n == sampling, got)
		}
	}

	// The killed node's machine is gone for good: its voter is removed.
	var live *node
	for _, n := range tc.nodes[:3] {
		if !n.dead {
			live = n
			break
		}
	}
	host, port, _ := net.SplitHostPort(live.Gossip)
	p, _ := strconv.Atoi(port)
	store := net.JoinHostPort(host, strconv.Itoa(p+2))
	voters := func(args ...string) []map[string]any {
		t.Helper()
		cmd := exec.Command(os.Args[0], append([]string{"voters"}, args...)...)
		cmd.Env = append(os.Environ(), "WTS_MAIN=1")
		out, err := cmd.Output()
		var vs []map[string]any
		if err != nil || json.Unmarshal(out, &vs) != nil {
			t.Fatalf("wts voters %v: %v %s", args, err, out)
		}
		return vs
	}
	if vs := voters("--store", store); len(vs) != 3 {
		t.Fatalf("voters before the removal: %v", vs)
	}
	vs := voters("remove", victim.Name, "--store", store)
	if len(vs) != 2 || vs[0]["name"] == victim.Name || vs[1]["name"] == victim.Name {
		t.Fatalf("voters after removing %s: %v", victim.Name, vs)
	}
}

// join starts one more node, joined to the live ones, with flags.
func (tc *testCluster) join(t *testing.T, flags ...string) *node {
	var live []string
	for _, n := range tc.nodes {
		if !n.dead {
			live = append(live, n.Gossip)
		}
	}
	n := startNodeWith(t, tc.data, tc.modelDir, live, flags...)
	tc.c.mu.Lock()
	tc.nodes = append(tc.nodes, n)
	tc.c.nodes = tc.nodes
	tc.c.mu.Unlock()
	return n
}

// wait polls operation id until it ends, and returns it.
func (tc *testCluster) wait(t *testing.T, id string) map[string]any {
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		_, op := tc.c.call(t, 0, "GET", "/operations/"+id, nil)
		if st := op["status"]; st == "succeeded" || st == "failed" || st == "cancelled" {
			return op
		}
	}
	t.Fatalf("operation %s did not end", id)
	return nil
}

// A node hosting a run is cut off mid-training (SIGSTOP: to the others it
// is a node behind a partition, or stalled) for longer than the bound on
// declaring it dead, while training goes on through the others; then it
// comes back, still holding its activations, its executor's jobs and its
// store writes in flight. The others took its runs over: what it does
// when it resumes is fenced (its writes refused, its activations gone),
// and every check of the killed-node test holds.
func TestClusterPartitionedNodeIsFenced(t *testing.T) {
	tc, ids := trainingCluster(t)
	victim := -1
	resumed := make(chan struct{})
	acked := tc.train(t, ids, pairs, 3, func() {
		victim = tc.runHost(t)
		tc.setDead(victim, true)
		if err := tc.nodes[victim].Pause(); err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(resumed)
			time.Sleep(cluster.DeadWithin + 4*time.Second) // the others have declared it dead and taken its runs
			tc.nodes[victim].Resume()
			tc.setDead(victim, false)
		}()
	})
	<-resumed
	tc.checkRuns(t, ids, acked)
	tc.checkAudit(t, runs*pairs*2)
	// Back in the cluster, the node serves again, the others' work included.
	for r, id := range ids {
		req, _ := http.NewRequest("GET", "http://"+tc.nodes[victim].Addr+"/v1/training/runs/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+tc.c.key)
		resp, err := tc.c.http.Do(req)
		if err != nil {
			t.Fatalf("the node that came back: %v", err)
		}
		var run map[string]any
		json.NewDecoder(resp.Body).Decode(&run)
		resp.Body.Close()
		if resp.StatusCode != 200 || run["next_seq_id"] != float64(2*pairs+1) {
			t.Fatalf("run %d through the node that came back: %d %v", r, resp.StatusCode, run)
		}
	}
	t.Logf("fenced activations on the node that came back: %d", strings.Count(tc.nodes[victim].Log(), "grain fenced by a newer activation"))
}
