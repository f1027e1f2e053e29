package main

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	self := func(args ...string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "WTS_MAIN=1")
		return cmd
	}
	n, err := service.StartNode(self, data, join, "--model", "tiny="+modelDir, "--log-level", "debug", "--memory-budget", strconv.Itoa(2<<30))
	if err != nil {
		t.Fatal(err)
	}
	return &node{Node: n}
}

// client calls the API of whichever node answers.
type client struct {
	key   string
	nodes []*node
	mu    sync.Mutex
	http  http.Client
}

// call sends a request to node i (or, when it cannot answer, to the next
// live one) until an answer other than 503 comes, and returns its status
// and body.
func (c *client) call(t *testing.T, i int, method, path string, body []byte) (int, map[string]any) {
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

// Three nodes on one shared data folder train three runs, each run's
// operations sent to all three in turn; the node hosting a run is killed
// (SIGKILL) mid-training. Every acknowledged operation then ends
// succeeded, in seq_id order, each optim_step applied once (the optimizer's
// step numbers count 1, 2, 3, ...), no executor ran an operation twice
// for one activation of its run (the executors' audit lines), and every
// run goes on running. Then a fourth node joins, and new runs are placed
// on it.
func TestClusterSurvivesAKilledNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nodes")
	}
	data := t.TempDir()
	modelDir := filepath.Join(data, "tiny")
	if err := model.Generate("tiny", 1, modelDir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	rev, err := providers.Revision(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	first := startNode(t, data, modelDir)
	nodes := []*node{first}
	defer func() {
		var stopping sync.WaitGroup // together: the last voters would wait for a quorum
		for _, n := range nodes {
			if !n.dead {
				stopping.Add(1)
				go func() { defer stopping.Done(); n.Stop() }()
			}
		}
		stopping.Wait()
		for _, n := range nodes {
			if t.Failed() {
				for _, line := range strings.Split(n.Log(), "\n") {
					if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, `"level":"WARN"`) {
						t.Logf("%s: %s", n.Name, line)
					}
				}
			}
		}
	}()
	for range 2 {
		nodes = append(nodes, startNode(t, data, modelDir, first.Gossip))
	}
	key := first.FirstKey()
	if key == "" {
		t.Fatalf("no first key in the log:\n%s", first.Log())
	}
	c := &client{key: key, nodes: nodes, http: http.Client{Timeout: 60 * time.Second}}

	const runs, pairs, killAfter = 3, 8, 3
	ids := make([]string, runs)
	for r := range ids {
		_, s := c.call(t, r, "POST", "/sessions", []byte(fmt.Sprintf(`{"request_id":"s%d"}`, r)))
		code, run := c.call(t, r+1, "POST", "/sessions/"+s["id"].(string)+"/runs",
			[]byte(fmt.Sprintf(`{"request_id":"r","base_model":"tiny","model_revision":%q,"lora":{"rank":4}}`, rev)))
		if code != 201 {
			t.Fatalf("create run: %d %v", code, run)
		}
		ids[r] = run["id"].(string)
	}

	batch := map[string]any{"data": []any{map[string]any{"model_input": map[string]any{"token_ids": []int{1, 17, 42, 9, 7, 3, 5, 8}},
		"loss_fn_inputs": map[string]any{"target_tokens": []int{17, 42, 9, 7, 3, 5, 8, 2}}}}}
	acked := make([][]string, runs)
	var progress sync.WaitGroup
	progress.Add(runs)
	kill := make(chan struct{})
	var wg sync.WaitGroup
	for r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range pairs {
				if i == killAfter {
					progress.Done()
					<-kill
				}
				for k, op := range []struct {
					kind    string
					payload any
				}{{"forward_backward", batch}, {"optim_step", map[string]any{"adam_params": map[string]any{"learning_rate": 1e-2}}}} {
					seq := 2*i + k + 1
					body := service.Operation(seq, "k"+strconv.Itoa(seq), op.kind, op.payload)
					code, out := c.call(t, seq, "POST", "/runs/"+ids[r]+"/operations", body)
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
	victim := -1
	for i, n := range nodes {
		var reply httpapi.NodeReply
		if _, err := adminCall(data, n.Name, "/admin/node", nil, &reply); err == nil && reply.Grains["run"] > 0 {
			victim = i
			break
		}
	}
	if victim < 0 {
		t.Fatal("no node hosts a run")
	}
	c.mu.Lock()
	nodes[victim].dead = true
	c.mu.Unlock()
	nodes[victim].Kill()
	killed := time.Now()
	close(kill)
	wg.Wait()

	for r, id := range ids {
		var items []any
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			_, page := c.call(t, r, "GET", "/runs/"+id+"/operations?after_seq=0&limit=500", nil)
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
				t.Fatalf("run %d not settled 90 s after the kill: %v", r, items)
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
		if _, run := c.call(t, r, "GET", "/runs/"+id, nil); run["status"] != "running" {
			t.Fatalf("run %d after the kill: %v", r, run)
		}
	}
	t.Logf("every run settled %v after the kill", time.Since(killed).Round(time.Millisecond))

	// The executors' audit: no operation ran twice under one activation.
	ran := map[string]int{}
	audit := regexp.MustCompile(`"msg":"executed","run":"([^"]+)","seq":(\d+),"epoch":(\d+)`)
	for _, n := range nodes {
		for _, m := range audit.FindAllStringSubmatch(n.Log(), -1) {
			k := strings.Join(m[1:], "/")
			if ran[k]++; ran[k] > 1 {
				t.Fatalf("executed twice in one activation: %s", k)
			}
		}
	}
	if len(ran) < runs*pairs*2 {
		t.Fatalf("audit lines for %d executions, want at least %d", len(ran), runs*pairs*2)
	}

	// A fourth node joins (a client of the store: it has its three
	// voters, one of them down), and new runs are placed on it too.
	var live []string
	for _, n := range nodes {
		if !n.dead {
			live = append(live, n.Gossip)
		}
	}
	fourth := startNode(t, data, modelDir, live...)
	nodes = append(nodes, fourth)
	c.mu.Lock()
	c.nodes = append(c.nodes, fourth)
	c.mu.Unlock()
	t.Logf("a fourth node joined %v after the kill", time.Since(killed).Round(time.Millisecond))
	if !strings.Contains(fourth.Log(), `"voter":false`) {
		t.Error("the fourth node became a voter")
	}
	for r := range 24 {
		_, s := c.call(t, r, "POST", "/sessions", []byte(fmt.Sprintf(`{"request_id":"late%d"}`, r)))
		_, run := c.call(t, r, "POST", "/sessions/"+s["id"].(string)+"/runs",
			[]byte(fmt.Sprintf(`{"request_id":"r","base_model":"tiny","model_revision":%q,"lora":{"rank":4}}`, rev)))
		if code, out := c.call(t, r, "POST", "/runs/"+run["id"].(string)+"/operations", service.Operation(1, "k1", "forward", batch)); code != 202 {
			t.Fatalf("a run after the join: %d %v", code, out)
		}
	}
	t.Logf("24 runs made %v after the kill", time.Since(killed).Round(time.Millisecond))
	var reply httpapi.NodeReply
	if _, err := adminCall(data, fourth.Name, "/admin/node", nil, &reply); err != nil || reply.Grains["run"] == 0 {
		t.Fatalf("no run placed on the node that joined: %v %v", reply.Grains, err)
	}
	t.Logf("the node that joined hosts %d of 24 new runs", reply.Grains["run"])
}
