// Command soak runs a wts node under mixed load from several organizations
// for a while, and kills it (kill -9) or stops it (SIGTERM) at random
// moments and starts it again on the same data folder. At the end it lets
// every operation settle and checks the record against what the clients
// were told:
//
//   - lost: an acknowledged operation (a 202 with its id) that is missing,
//     or another one in its place;
//   - duplicated: an optim_step applied twice (a run's optimizer step
//     numbers must count 1, 2, 3, … over its succeeded optim_steps);
//   - runs interrupted, operations failed by code, 429s answered;
//   - submission latency p50/p99 and the node's peak RSS (VmHWM) beside
//     its --memory-budget;
//   - money: once every session is closed and its cost settled, each
//     organization's ledger must have nothing reserved or pending, its
//     sums must be the fold of its entries, and its settled spend exactly
//     the sum of its sessions' totals (no micro-dollar lost or counted
//     twice through the kills);
//   - replays to another loss: a trainer rebuilt after a restart replays
//     its run's operations alone, and each must give the loss recorded
//     when it ran (perhaps in a pass shared with other runs: about half
//     the sessions ask for provider_b's shared pool).
//
// It exits 1 when anything was lost or duplicated, an operation failed
// internal_error, a ledger did not balance, a replay gave another loss,
// or the peak RSS passed the budget.
//
// With --nodes N (N > 1) the same runs against a cluster of N nodes on one
// shared data folder (`make chaos`): each request goes to a random node
// that is up, at each event one node is killed or stopped and started
// again (one at a time, so two of the three store voters stay up), and now
// and then a new node joins instead.
//
//	go run ./bench/soak --wts bin/wts [--duration 10m] [--orgs 3] [--runs 3] [--preset small] [--budget 805306368]
//	go run ./bench/soak --wts bin/wts --nodes 3 [--joins 2] [--duration 5m] [--min-gap 5s --max-gap 15s]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/wts-project/wts/bench/service"
)

const v1 = "/v1/training"

func main() {
	wts := flag.String("wts", "", "the wts binary (default: build it)")
	duration := flag.Duration("duration", 10*time.Minute, "how long the load and the restarts go on")
	orgs := flag.Int("orgs", 3, "organizations, each with its own key")
	runs := flag.Int("runs", 3, "runs (one client each) per organization")
	dataDir := flag.String("data", "./build/soak", "the node's data folder (emptied first)")
	preset := flag.String("preset", "small", "the generated model")
	budget := flag.Int64("budget", 768<<20, "the node's --memory-budget in bytes; the peak RSS must stay within it")
	minGap := flag.Duration("min-gap", 15*time.Second, "least time between two restarts")
	maxGap := flag.Duration("max-gap", 45*time.Second, "most time between two restarts")
	seed := flag.Uint64("seed", 1, "seed of the restarts' timing and kind")
	nodes := flag.Int("nodes", 1, "nodes: above 1, a cluster on one shared data folder")
	joins := flag.Int("joins", 2, "with --nodes: at most this many nodes join during the run")
	flag.Parse()

	bin := service.Build(*wts)
	n := newNode(bin, *dataDir, *preset, *budget, *nodes)
	n.start()
	keys := make([]string, *orgs)
	for i := range keys {
		keys[i] = n.key(fmt.Sprint("org", i))
	}

	var clients []*client
	for o, key := range keys {
		for r := range *runs {
			clients = append(clients, &client{n: n, key: key, name: fmt.Sprintf("org%d-run%d", o, r), rng: rand.New(rand.NewPCG(*seed, uint64(len(clients))))})
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); c.load(stop) }()
	}
	kills, terms, joined := n.chaos(*duration, *minGap, *maxGap, *joins, rand.New(rand.NewPCG(*seed, 99)))
	close(stop)
	wg.Wait()

	// One clean restart, then every operation settles.
	log.Printf("load ended; a clean restart of every node, then every operation settles")
	for i := range n.members {
		n.restart(i, syscall.SIGTERM)
	}
	settled := n.settle(clients)
	var r report
	for _, c := range clients {
		c.check(&r)
	}
	r.unbalanced, r.spent = n.balance(keys, clients)
	n.stop()
	slices.Sort(n.latencies)
	fmt.Printf("soak: %v, %d organizations × %d runs on %s, %d node(s) (%d joined), %d kill -9 and %d SIGTERM restarts\n\n",
		*duration, *orgs, *runs, *preset, len(n.members), joined, kills, terms)
	fmt.Printf("%-28s %d\n", "acknowledged", r.acknowledged)
	fmt.Printf("%-28s %d\n", "lost", r.lost)
	fmt.Printf("%-28s %d\n", "duplicated", r.duplicated)
	fmt.Printf("%-28s %d of %d\n", "runs interrupted", r.interrupted, len(clients))
	fmt.Printf("%-28s %d\n", "429 answered", n.throttled.Load())
	fmt.Printf("%-28s %v\n", "operations ended by status", r.statuses)
	fmt.Printf("%-28s %v\n", "failed or cancelled by code", r.codes)
	fmt.Printf("%-28s p50 %.2f ms, p99 %.2f ms (%d submissions)\n", "submission latency", service.Percentile(n.latencies, 0.5), service.Percentile(n.latencies, 0.99), len(n.latencies))
	fmt.Printf("%-28s %d MiB (budget %d MiB)\n", "peak RSS", n.peak.Load()>>20, *budget>>20)
	fmt.Printf("%-28s %v\n", "settled after the load", settled)
	fmt.Printf("%-28s %d of %d (their sessions cost %d µUSD in all)\n", "ledgers not balanced", r.unbalanced, len(keys), r.spent)
	fmt.Printf("%-28s %d\n", "replays to another loss", n.replays.Load())
	if r.lost > 0 || r.duplicated > 0 || r.unbalanced > 0 || r.codes["internal_error"] > 0 || n.peak.Load() > *budget || n.replays.Load() > 0 {
		fmt.Println("\nFAIL")
		os.Exit(1)
	}
	fmt.Println("\nPASS")
}

// node is the service under test: one node, or a cluster of several on
// one data folder, each restarted on its own addresses.
type node struct {
	bin, data string
	shared    []string // every member's flags but its own
	mu        sync.Mutex
	members   []*member
	peak      atomic.Int64 // the largest VmHWM seen, over every process
	throttled atomic.Int64
	replays   atomic.Int64 // replayed operations whose loss differed from the recorded one
	latMu     sync.Mutex
	latencies []time.Duration
	revision  string
	model     string
	cluster   bool
}

// member is one process of the service.
type member struct {
	addr   string // its API address, the same at every start
	gossip string // in a cluster, its --advertise address
	cmd    *exec.Cmd
	proc   *service.Process
	up     bool
}

// freeAddr is a free TCP address on 127.0.0.1.
func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func newNode(bin, data, preset string, budget int64, nodes int) *node {
	dir, rev := service.Prepare(data, preset)
	n := &node{bin: bin, data: data, revision: rev, model: preset, cluster: nodes > 1,
		shared: []string{"--data", data, "--model", preset + "=" + dir, "--log-level", "warn",
			"--memory-budget", strconv.FormatInt(budget, 10), "--drain", "2s", "--max-queue-run", "64", "--settle-after", "1s"}}
	for range nodes {
		n.add()
	}
	return n
}

// add makes a new member (not started).
func (n *node) add() {
	m := &member{addr: freeAddr()}
	if n.cluster {
		base, err := service.PortBlock()
		if err != nil {
			log.Fatal(err)
		}
		m.gossip = "127.0.0.1:" + strconv.Itoa(base)
	}
	n.mu.Lock()
	n.members = append(n.members, m)
	n.mu.Unlock()
}

// key creates a key for org through a running node's admin socket.
func (n *node) key(org string) string {
	out, err := exec.Command(n.bin, "keys", "create", "--org", org, "--data", n.data).Output()
	if err != nil {
		log.Fatalf("keys create: %v", err)
	}
	service.Credit(n.bin, n.data, org)
	return strings.TrimSpace(string(out))
}

// start starts every member, one after another.
func (n *node) start() {
	for i := range n.members {
		n.launch(i)
	}
}

// launch starts member i; in a cluster it joins every other member that
// has ever started (any one that is up lets it in).
func (n *node) launch(i int) {
	n.mu.Lock()
	m := n.members[i]
	args := append([]string{"serve", "--addr", m.addr}, n.shared...)
	if n.cluster {
		args = append(args, "--advertise", m.gossip)
		var join []string
		for _, o := range n.members {
			if o != m && o.cmd != nil {
				join = append(join, o.gossip)
			}
		}
		if len(join) > 0 {
			args = append(args, "--join", strings.Join(join, ","))
		}
	}
	n.mu.Unlock()
	cmd := exec.Command(n.bin, args...)
	p, err := service.Start(cmd)
	if err != nil {
		log.Fatal(err)
	}
	n.mu.Lock()
	m.cmd, m.proc, m.up = cmd, p, true
	n.mu.Unlock()
	go n.watch(cmd)
}

// watch follows a process's peak resident memory until it exits.
func (n *node) watch(cmd *exec.Cmd) {
	for {
		hwm := vmHWM(cmd.Process.Pid)
		if hwm < 0 {
			return
		}
		for {
			old := n.peak.Load()
			if hwm <= old || n.peak.CompareAndSwap(old, hwm) {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// vmHWM is a process's peak resident set, -1 once it is gone.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil || strings.Contains(string(b), "State:\tZ") {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return -1
}

// restart stops member i with s and starts it again.
func (n *node) restart(i int, s syscall.Signal) {
	n.mu.Lock()
	m := n.members[i]
	m.up = false
	n.mu.Unlock()
	m.cmd.Process.Signal(s)
	m.cmd.Wait()
	n.countReplays(m.proc)
	n.launch(i)
}

// countReplays counts the warnings of an ended process that a trainer it
// rebuilt replayed an operation to another loss than the recorded one: the
// engine is deterministic, whichever runs shared a pass, so there must be
// none.
func (n *node) countReplays(p *service.Process) {
	n.replays.Add(int64(strings.Count(p.Log(), "replayed loss differs")))
}

// stop stops every member together (one by one, a cluster's last store
// voters would wait for a quorum).
func (n *node) stop() {
	var wg sync.WaitGroup
	for _, m := range n.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.cmd.Process.Signal(syscall.SIGTERM)
			m.cmd.Wait()
			n.countReplays(m.proc)
		}()
	}
	wg.Wait()
}

// chaos restarts a member at random moments until d has passed: kill -9
// or SIGTERM, evenly, one member at a time; in a cluster, now and then
// (up to joins times) a new member joins instead.
func (n *node) chaos(d, minGap, maxGap time.Duration, joins int, r *rand.Rand) (kills, terms, joined int) {
	end := time.Now().Add(d)
	for {
		gap := minGap + time.Duration(r.Int64N(int64(maxGap-minGap)+1))
		if time.Now().Add(gap).After(end) {
			time.Sleep(time.Until(end))
			return
		}
		time.Sleep(gap)
		switch i := r.IntN(len(n.members)); {
		case n.cluster && joined < joins && r.IntN(4) == 0:
			joined++
			n.add()
			log.Printf("a node joins")
			n.launch(len(n.members) - 1)
		case r.IntN(2) == 0:
			kills++
			log.Printf("kill -9 node %d", i)
			n.restart(i, syscall.SIGKILL)
		default:
			terms++
			log.Printf("SIGTERM node %d", i)
			n.restart(i, syscall.SIGTERM)
		}
	}
}

// fail ends the soak: it prints what the members logged, kills them (none
// is left running) and exits.
func (n *node) fail(format string, args ...any) {
	n.dumpLogs()
	n.mu.Lock()
	for _, m := range n.members {
		if m.cmd != nil && m.cmd.Process != nil {
			m.cmd.Process.Kill()
		}
	}
	n.mu.Unlock()
	log.Fatalf(format, args...)
}

// dumpLogs prints what the members logged at warn level and above, but
// protoactor's own lines, for a failure's context.
func (n *node) dumpLogs() {
	time.Sleep(time.Second) // the lines a node wrote as it answered reach its Process
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, m := range n.members {
		if m.proc == nil {
			continue
		}
		for _, line := range strings.Split(m.proc.Log(), "\n") {
			if !strings.Contains(line, `"component":"protoactor"`) {
				fmt.Fprintf(os.Stderr, "member %d: %s\n", i, line)
			}
		}
	}
}

// pickAddr is the API address of a random member that is up.
func (n *node) pickAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var up []string
	for _, m := range n.members {
		if m.up {
			up = append(up, m.addr)
		}
	}
	if len(up) == 0 {
		return n.members[0].addr // restarting: the request fails and is retried
	}
	return up[rand.IntN(len(up))]
}

// do sends one request, retried while the node is away; it returns the
// status and body of the answer.
func (n *node) do(method, path, key string, body []byte) (int, []byte, time.Duration) {
	for {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + n.pickAddr() + path)
		req.Header.SetMethod(method)
		req.Header.Set("Authorization", "Bearer "+key)
		if body != nil {
			req.Header.SetContentType("application/json")
			req.SetBodyRaw(body)
		}
		start := time.Now()
		err := fasthttp.DoTimeout(req, resp, 2*time.Minute)
		took := time.Since(start)
		status, out := resp.StatusCode(), append([]byte(nil), resp.Body()...)
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		if err != nil || status == 503 {
			time.Sleep(100 * time.Millisecond) // the node is restarting
			continue
		}
		return status, out, took
	}
}

// client drives one run: it submits a mix of operations in seq_id order,
// each retried unchanged until it is acknowledged.
type client struct {
	n         *node
	key, name string
	rng       *rand.Rand
	session   string
	run       string
	acked     map[int64]string // seq_id → the operation id the node answered
	kinds     map[int64]string
	ended     string // the run's status once it refused operations
}

func (c *client) load(stop <-chan struct{}) {
	c.acked, c.kinds = map[int64]string{}, map[int64]string{}
	provider := "auto" // provider_a while its dedicated trainers last
	if c.rng.IntN(2) == 0 {
		provider = "provider_b" // the shared pool, whose runs share passes
	}
	c.session = c.create(v1+"/sessions", `{"request_id":"`+c.name+`","idle_ttl_s":3600,"provider":"`+provider+`"}`)
	s := c.session
	c.run = c.create(v1+"/sessions/"+s+"/runs", fmt.Sprintf(`{"request_id":"r","base_model":%q,"model_revision":%q,"lora":{"rank":8}}`, c.n.model, c.n.revision))
	for seq := int64(1); ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		kind, payload := c.pick(seq)
		body := service.Operation(int(seq), fmt.Sprint("k", seq), kind, payload)
		for {
			status, out, took := c.n.do("POST", v1+"/runs/"+c.run+"/operations", c.key, body)
			switch {
			case status == 202:
				c.acked[seq], c.kinds[seq] = field(out, "id"), kind
				c.n.latMu.Lock()
				c.n.latencies = append(c.n.latencies, took)
				c.n.latMu.Unlock()
			case status == 429:
				c.n.throttled.Add(1)
				select {
				case <-stop: // the load is over; this one was never acknowledged
					return
				case <-time.After(time.Duration(100+c.rng.IntN(400)) * time.Millisecond):
				}
				continue
			case status == 409 && strings.Contains(string(out), "run_not_accepting"):
				c.ended = string(out)
				return
			default:
				c.n.fail("%s seq %d: %d %s", c.name, seq, status, out)
			}
			break
		}
	}
}

// pick is operation seq's kind and payload: training pairs, with a
// forward or a run-scoped sample now and then.
func (c *client) pick(seq int64) (string, any) {
	tokens := func(n int) []int {
		t := make([]int, n)
		for i := range t {
			t[i] = int((seq*7 + int64(i)*13) % 64)
		}
		return t
	}
	datum := func() map[string]any {
		t := tokens(33)
		return map[string]any{"model_input": map[string]any{"token_ids": t[:32]}, "loss_fn_inputs": map[string]any{"target_tokens": t[1:]}}
	}
	switch {
	case seq%10 == 0:
		return "sample", map[string]any{"prompt": map[string]any{"token_ids": tokens(4)}, "num_samples": 2,
			"parameters": map[string]any{"max_tokens": 16, "temperature": 0.8, "top_p": 0.95, "top_k": -1, "seed": seq}}
	case seq%10 == 5:
		return "forward", map[string]any{"data": []any{datum(), datum()}}
	case seq%2 == 1:
		return "forward_backward", map[string]any{"data": []any{datum(), datum(), datum(), datum()}}
	}
	return "optim_step", map[string]any{"adam_params": map[string]any{"learning_rate": 1e-3}}
}

// create makes a session or run (idempotent on its request_id) and returns
// its id.
func (c *client) create(path, body string) string {
	status, out, _ := c.n.do("POST", path, c.key, []byte(body))
	if status != 200 && status != 201 {
		log.Fatalf("%s %s: %d %s", c.name, path, status, out)
	}
	return field(out, "id")
}

// settle waits until no operation of any client's run is pending or
// executing.
func (n *node) settle(clients []*client) time.Duration {
	start := time.Now()
	for _, c := range clients {
		for {
			busy := false
			for _, o := range c.ops() {
				if s := o["status"]; s == "pending" || s == "executing" || s == "parked" {
					busy = true
				}
			}
			if !busy {
				break
			}
			if time.Since(start) > 90*time.Second {
				for _, o := range c.ops() {
					if s := o["status"]; s == "pending" || s == "executing" || s == "parked" {
						log.Printf("%s: seq %v %v %v", c.name, o["seq_id"], o["kind"], s)
					}
				}
				n.fail("%s (run %s): operations still running 90 s after the load", c.name, c.run)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return time.Since(start).Round(time.Millisecond)
}

// ops lists every operation of the client's run.
func (c *client) ops() []map[string]any {
	var all []map[string]any
	after := 0
	for {
		status, out, _ := c.n.do("GET", fmt.Sprintf("%s/runs/%s/operations?after_seq=%d&limit=500", v1, c.run, after), c.key, nil)
		if status != 200 {
			log.Fatalf("%s list: %d %s", c.name, status, out)
		}
		var page struct {
			Items []map[string]any `json:"items"`
			Next  int              `json:"next_after_seq"`
		}
		if err := json.Unmarshal(out, &page); err != nil {
			log.Fatal(err)
		}
		all = append(all, page.Items...)
		if len(page.Items) < 500 {
			return all
		}
		after = page.Next
	}
}

type report struct {
	acknowledged, lost, duplicated, interrupted, unbalanced int
	spent                                                   int64 // every session's settled total
	statuses, codes                                         map[string]int
}

// balance closes every client's session, waits for their costs to settle,
// and checks each organization's ledger against them; it returns how many
// ledgers do not balance, and what the sessions cost in all.
func (n *node) balance(keys []string, clients []*client) (int, int64) {
	total := map[string]int64{} // by key: the sessions' settled totals
	for _, c := range clients {
		if c.session == "" {
			continue
		}
		n.do("POST", v1+"/sessions/"+c.session+"/close", c.key, []byte(`{"request_id":"close"}`))
		deadline := time.Now().Add(60 * time.Second)
		for {
			_, ss, _ := n.do("GET", v1+"/sessions/"+c.session, c.key, nil)
			status, cost, _ := n.do("GET", v1+"/sessions/"+c.session+"/cost", c.key, nil)
			var v struct {
				Status string `json:"settlement_status"`
				Total  any    `json:"total_microusd"`
			}
			json.Unmarshal(cost, &v)
			if field(ss, "status") == "closed" && status == 200 && v.Status == "settled" {
				total[c.key] += int64(v.Total.(float64))
				break
			}
			if time.Now().After(deadline) {
				n.fail("%s: session %s not closed and settled 60 s after its close: %s %s", c.name, c.session, ss, cost)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	bad, spent := 0, int64(0)
	for i, key := range keys {
		spent += total[key]
		var l struct {
			Granted  int64 `json:"granted_microusd"`
			Settled  int64 `json:"settled_spend_microusd"`
			Pending  int64 `json:"pending_spend_microusd"`
			Reserved int64 `json:"reserved_microusd"`
			Entries  []struct {
				Kind   string `json:"kind"`
				Amount int64  `json:"amount_microusd"`
			} `json:"entries"`
			Next int64 `json:"next_after_seq"`
		}
		fold := map[string]int64{}
		for after := int64(0); ; after = l.Next {
			l.Entries = nil
			status, out, _ := n.do("GET", fmt.Sprintf("/v1/organization/ledger?after_seq=%d&limit=500", after), key, nil)
			if status != 200 || json.Unmarshal(out, &l) != nil {
				n.fail("org%d ledger: %d %s", i, status, out)
			}
			for _, e := range l.Entries {
				fold[e.Kind] += e.Amount
			}
			if len(l.Entries) < 500 {
				break
			}
		}
		reserved, pending, settled := fold["reserve"]-fold["release"], fold["pending"]-fold["settle"], fold["spend"]+fold["settle"]
		if l.Reserved != 0 || l.Pending != 0 || l.Settled != total[key] || reserved != 0 || pending != 0 || settled != l.Settled || fold["grant"] != l.Granted {
			bad++
			log.Printf("org%d ledger: reserved %d, pending %d, settled %d, granted %d; its entries fold to %d, %d, %d, %d; its sessions cost %d",
				i, l.Reserved, l.Pending, l.Settled, l.Granted, reserved, pending, settled, fold["grant"], total[key])
		}
	}
	return bad, spent
}

// check compares the run's record with what the client was told.
func (c *client) check(r *report) {
	if r.statuses == nil {
		r.statuses, r.codes = map[string]int{}, map[string]int{}
	}
	bySeq := map[int64]map[string]any{}
	for _, o := range c.ops() {
		bySeq[int64(o["seq_id"].(float64))] = o
		r.statuses[o["status"].(string)]++
		if code, ok := o["error_code"].(string); ok {
			r.codes[code]++
		}
	}
	r.acknowledged += len(c.acked)
	for seq, id := range c.acked {
		if o := bySeq[seq]; o == nil || o["id"] != id {
			r.lost++
			log.Printf("%s: acknowledged operation %s (seq %d) is not in the record: %v", c.name, id, seq, o)
		}
	}
	seqs := slices.Sorted(func(yield func(int64) bool) {
		for s := range bySeq {
			if !yield(s) {
				return
			}
		}
	})
	step := 0.0
	for _, seq := range seqs {
		o := bySeq[seq]
		if o["kind"] != "optim_step" || o["status"] != "succeeded" {
			continue
		}
		got := o["result"].(map[string]any)["metrics"].(map[string]any)["step"].(float64)
		if step++; got != step {
			r.duplicated++
			log.Printf("%s: optim_step seq %d took step %v, the %vth succeeded one", c.name, seq, got, step)
			step = got
		}
	}
	status, out, _ := c.n.do("GET", v1+"/runs/"+c.run, c.key, nil)
	if status == 200 && field(out, "status") == "interrupted" {
		r.interrupted++
	}
	if c.ended != "" {
		log.Printf("%s: the run stopped taking operations: %s", c.name, c.ended)
	}
}

func field(body []byte, name string) string {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return ""
	}
	s, _ := m[name].(string)
	return s
}
