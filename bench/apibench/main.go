// Command apibench measures durable operation submissions: how many
// POST /v1/training/runs/{id}/operations a real `wts serve` process
// acknowledges per second (each one fsynced before its 202), and the submit
// latency p50/p99, at several numbers of concurrent clients. Beside it, in the
// same run and with the same client, it measures a bare fasthttp handler that
// reads the same bodies and answers a fixed 202: the ceiling of HTTP on this
// machine, against which the service's figures are read.
//
// Each client owns a session and its run and submits forward operations in
// seq_id order (a run's operations are ordered, so one client per run is
// how callers drive it). The run's executor does execute them, on the tiny
// model, as it would in service.
//
//	go run ./bench/apibench [--clients 1,16,64] [--requests 20000] [--wts bin/wts]
//	go run ./bench/apibench --against OLD_BIN [--pairs 4] [--clients 64] [--wts bin/wts]
//	go run ./bench/apibench --nodes 3 [--pairs 4] [--clients 64] [--wts bin/wts]
//
// With --against, it measures the last level only, against a fresh node of
// each binary in turn, in pairs whose order alternates (new, old, old, new,
// ...), and prints every run, each binary's mean and their ratio: the way to
// tell a change from the host's noise. With --nodes N, the same between one
// node and a cluster of N on this machine (sharing its cores: the ratio is
// the cluster's overhead), the clients spread over the nodes.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/wts-project/wts/bench/harness"
	"github.com/wts-project/wts/bench/service"
)

func main() {
	clientsFlag := flag.String("clients", "1,16,64", "concurrent clients per level, comma-separated")
	requests := flag.Int("requests", 20000, "submissions per level (split evenly over the clients)")
	wts := flag.String("wts", "", "the wts binary (default: build it)")
	dataRoot := flag.String("data", "./build/apibench", "data folder (on the disk the service would use: fsync is measured)")
	tokens := flag.Int("tokens", 16, "tokens in each submitted forward")
	peerAddr := flag.String("serve-peer", "", "internal: serve the bare handler on this address")
	debugAddr := flag.String("debug-addr", "", "passed to wts serve: serve pprof there (to profile the service under load)")
	engineNice := flag.Int("engine-nice", 0, "passed to wts serve: the engine threads' nice (0: off, the default)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the service under the last level's load here (needs --debug-addr; that level's figures then carry the profiler's cost)")
	against := flag.String("against", "", "another wts binary to alternate with, at the last level only")
	nodes := flag.Int("nodes", 1, "above 1: alternate one node with a cluster of this many on this machine (clients spread over them), at the last level only")
	pairs := flag.Int("pairs", 4, "with --against or --nodes: runs of each")
	jsonOut := flag.String("json", "", "also write the levels' figures here as JSON (make bench's summary reads it)")
	flag.Parse()
	if *cpuProfile != "" && *debugAddr == "" {
		log.Fatal("--cpuprofile needs --debug-addr")
	}
	if *peerAddr != "" {
		servePeer(*peerAddr)
		return
	}
	levels := service.Levels(*clientsFlag)
	one := func(bin string) func() []*service.Process {
		return func() []*service.Process { return []*service.Process{service.Serve(bin, *dataRoot, "tiny")} }
	}
	switch {
	case *against != "":
		bin := service.Build(*wts)
		compare(setup{"new " + bin, one(bin)}, setup{"old " + *against, one(*against)}, levels[len(levels)-1], *requests, *tokens, *pairs)
		return
	case *nodes > 1:
		bin := service.Build(*wts)
		cluster := func() []*service.Process {
			var ps []*service.Process
			for _, n := range service.ServeCluster(bin, *dataRoot, "tiny", *nodes) {
				ps = append(ps, n.Process)
			}
			return ps
		}
		compare(setup{fmt.Sprintf("%d nodes", *nodes), cluster}, setup{"1 node", one(bin)}, levels[len(levels)-1], *requests, *tokens, *pairs)
		return
	}
	extra := []string{"--debug-addr", *debugAddr}
	if *engineNice != 0 { // older binaries, run for comparison, lack the flag
		extra = append(extra, "--engine-nice", fmt.Sprint(*engineNice))
	}
	svc := service.Serve(service.Build(*wts), *dataRoot, "tiny", extra...)
	defer svc.Stop()
	peer := startPeer()
	defer peer.Stop()

	rep := harness.APIReport{Tokens: *tokens, Provenance: harness.Begin()}
	fmt.Printf("durable submissions, %d per level, forward of %d tokens on the tiny model; peer: bare fasthttp 202\n\n", *requests, *tokens)
	fmt.Printf("%8s | %12s %9s %9s | %12s %9s %9s | %s\n", "clients", "service/s", "p50 ms", "p99 ms", "peer/s", "p50 ms", "p99 ms", "service/peer")
	for _, c := range levels {
		per := max(1, *requests/c)
		runs := svc.Runs(c, 4)
		bodies := levelBodies(c, per, *tokens)
		p := load([]string{peer.Addr}, c, func(int) string { return "/v1/training/runs/x/operations" }, svc.Key, bodies)
		before := svc.Scrape()
		cpu0, cpuOK := svc.CPU()
		start := time.Now()
		var profiled chan error
		if *cpuProfile != "" && c == levels[len(levels)-1] {
			profiled = make(chan error, 1)
			go func() { profiled <- profileService(*debugAddr, *cpuProfile) }()
		}
		s := load([]string{svc.Addr}, c, func(i int) string { return "/v1/training/runs/" + runs[i].Run.ID + "/operations" }, svc.Key, bodies)
		after := svc.Scrape()
		svc.WaitExecuted() // the next level starts on an idle executor
		executed := time.Since(start)
		cpu1, _ := svc.CPU()
		done := svc.Scrape()
		fmt.Printf("%8d | %12.0f %9.2f %9.2f | %12.0f %9.2f %9.2f | %.2f\n", c, s.rate, s.p50, s.p99, p.rate, p.p50, p.p99, s.rate/p.rate)
		lv := harness.APILevel{Clients: c, PerS: s.rate, P50: s.p50, P99: s.p99, PeerPerS: p.rate, PeerP99: p.p99, Errors: s.errors + p.errors}
		commits := after["wts_store_commits_total"] - before["wts_store_commits_total"]
		fmt.Printf("%8s   store: %.0f group commits, %.1f writes and %.1f pages each, %.2f ms each (fsync included)\n", "", commits,
			(after["wts_store_commit_writes_total"]-before["wts_store_commit_writes_total"])/commits,
			(after["wts_store_commit_pages_total"]-before["wts_store_commit_pages_total"])/commits,
			1000*(after["wts_store_commit_duration_seconds_sum"]-before["wts_store_commit_duration_seconds_sum"])/commits)
		// Acknowledged is not executed: the engine works through the queue
		// at its own pace, and this is the pace.
		fmt.Printf("%8s   executed: all %d %.2f s after the first submission, %.0f/s\n", "", per*c, executed.Seconds(), float64(per*c)/executed.Seconds())
		if cpuOK {
			lv.CPUMicros = float64((cpu1 - cpu0).Microseconds()) / float64(per*c)
			fmt.Printf("%8s   service CPU: %.0f µs per submission, its execution included\n", "", lv.CPUMicros)
		}
		// Allocation drives the collector, whose cycles are among the
		// stalls the slow requests wait out.
		fmt.Printf("%8s   service memory: %.1f KB allocated per submission, its execution included; %.0f collections\n", "",
			(done["go_memstats_alloc_bytes_total"]-before["go_memstats_alloc_bytes_total"])/1024/float64(per*c),
			done["go_gc_duration_seconds_count"]-before["go_gc_duration_seconds_count"])
		if profiled != nil {
			if err := <-profiled; err != nil {
				log.Fatalf("profile: %v", err)
			}
			fmt.Printf("%8s   profile: %s (the first seconds of the load)\n", "", *cpuProfile)
		}
		if s.errors > 0 || p.errors > 0 {
			fmt.Printf("         errors: service %d (first: %s), peer %d\n", s.errors, s.firstError, p.errors)
		}
		rep.Levels = append(rep.Levels, lv)
	}
	if *jsonOut != "" {
		rep.Describe("go run ./bench/apibench " + strings.Join(os.Args[1:], " "))
		raw, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonOut, append(raw, '\n'), 0o644)
		}
		if err != nil {
			log.Fatalf("--json: %v", err)
		}
	}
}

// levelBodies are c clients' per submissions each.
func levelBodies(c, per, tokens int) [][][]byte {
	bodies := make([][][]byte, c)
	for i := range bodies {
		bodies[i] = make([][]byte, per)
		for j := range per {
			bodies[i][j] = opBody(j+1, fmt.Sprintf("k%d", j), tokens, i+j)
		}
	}
	return bodies
}

// setup is what one side of a comparison runs: its name, and how to start
// its nodes (fresh, on an empty data folder).
type setup struct {
	name  string
	start func() []*service.Process
}

// compare alternates fresh starts of a and b, pairs times each, at c
// clients (spread over a setup's nodes), and prints each run, the means and
// their ratio a/b.
func compare(a, b setup, c, requests, tokens, pairs int) {
	per := max(1, requests/c)
	bodies := levelBodies(c, per, tokens)
	rates := map[string][]float64{}
	cpus := map[string][]float64{}
	fmt.Printf("durable submissions at %d clients, %d each run, forward of %d tokens on the tiny model\n\n", c, per*c, tokens)
	fmt.Printf("%-6s %-40s | %10s %8s %8s | %s\n", "run", "setup", "service/s", "p50 ms", "p99 ms", "CPU a submission")
	for i := range 2 * pairs {
		side := a
		if i%4 == 1 || i%4 == 2 { // a, b, b, a, ...
			side = b
		}
		nodes := side.start()
		runs := nodes[0].Runs(c, 4)
		cpu0, cpuOK := cpuOf(nodes)
		addrs := make([]string, len(nodes))
		for j, n := range nodes {
			addrs[j] = n.Addr
		}
		s := load(addrs, c, func(i int) string { return "/v1/training/runs/" + runs[i].Run.ID + "/operations" }, nodes[0].Key, bodies)
		for _, n := range nodes {
			n.WaitExecuted()
		}
		cpu1, _ := cpuOf(nodes)
		stopAll(nodes)
		cpu := float64((cpu1 - cpu0).Microseconds()) / float64(per*c)
		if !cpuOK {
			cpu = 0
		}
		rates[side.name], cpus[side.name] = append(rates[side.name], s.rate), append(cpus[side.name], cpu)
		fmt.Printf("%-6d %-40s | %10.0f %8.2f %8.2f | %.0f µs\n", i+1, side.name, s.rate, s.p50, s.p99, cpu)
		if s.errors > 0 {
			fmt.Printf("       errors: %d (first: %s)\n", s.errors, s.firstError)
		}
	}
	mean := func(xs []float64) float64 {
		var t float64
		for _, x := range xs {
			t += x
		}
		return t / float64(len(xs))
	}
	fmt.Printf("\nmeans: %s %.0f/s (%.0f µs), %s %.0f/s (%.0f µs); ratio %.2f\n", a.name,
		mean(rates[a.name]), mean(cpus[a.name]), b.name, mean(rates[b.name]), mean(cpus[b.name]), mean(rates[a.name])/mean(rates[b.name]))
}

// cpuOf is the processor time of all the nodes together.
func cpuOf(nodes []*service.Process) (time.Duration, bool) {
	var sum time.Duration
	for _, n := range nodes {
		used, ok := n.CPU()
		if !ok {
			return 0, false
		}
		sum += used
	}
	return sum, true
}

// stopAll stops the nodes together (one by one, the last voters of a
// cluster would wait for a quorum).
func stopAll(nodes []*service.Process) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.Stop() }()
	}
	wg.Wait()
}

// profileService writes a CPU profile of the service taken through its
// pprof address while the load runs: fetched by hand, a profile request
// that found nothing listening left an older file in place, and it was
// read as this run's.
func profileService(addr, path string) error {
	status, body, err := fasthttp.GetTimeout(nil, "http://"+addr+"/debug/pprof/profile?seconds=4", 30*time.Second)
	if err != nil {
		return err
	}
	if status != fasthttp.StatusOK {
		return fmt.Errorf("%s answered %d: %.200s", addr, status, body)
	}
	return os.WriteFile(path, body, 0o644)
}

// result is one level's measurement.
type result struct {
	rate, p50, p99 float64 // per second; milliseconds
	errors         int
	firstError     string
}

// load runs c clients, each posting its bodies in order and waiting for
// each answer before the next, client i to addrs[i % len(addrs)], and
// measures the whole.
func load(addrs []string, c int, path func(int) string, key string, bodies [][][]byte) result {
	hcs := make([]*fasthttp.HostClient, len(addrs))
	for i, addr := range addrs {
		hcs[i] = &fasthttp.HostClient{Addr: addr, MaxConns: c, ReadTimeout: time.Minute, WriteTimeout: time.Minute}
	}
	var mu sync.Mutex
	var res result
	all, took := service.Clients(c, func(i int) []time.Duration {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		hc := hcs[i%len(hcs)]
		req.SetRequestURI("http://" + hc.Addr + path(i))
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		lat := make([]time.Duration, 0, len(bodies[i]))
		for _, b := range bodies[i] {
			req.SetBodyRaw(b)
			t0 := time.Now()
			err := hc.Do(req, resp)
			lat = append(lat, time.Since(t0))
			if err != nil || resp.StatusCode() != 202 {
				mu.Lock()
				if res.errors++; res.firstError == "" {
					res.firstError = fmt.Sprintf("%v %d %.200s", err, resp.StatusCode(), resp.Body())
				}
				mu.Unlock()
			}
		}
		return lat
	})
	res.rate, res.p50, res.p99 = float64(len(all))/took.Seconds(), service.Percentile(all, 0.50), service.Percentile(all, 0.99)
	return res
}

// opBody is a forward submission with its correct request_hash.
func opBody(seq int, key string, tokens, salt int) []byte {
	ids := make([]int, tokens)
	for i := range ids {
		ids[i] = (salt*7 + i*5) % 64
	}
	return service.Operation(seq, key, "forward", map[string]any{
		"data": []any{map[string]any{"model_input": map[string]any{"token_ids": ids}, "loss_fn_inputs": map[string]any{"target_tokens": ids}}}})
}

// startPeer runs this binary as the bare handler, in its own process like
// the service.
func startPeer() *service.Process {
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	p, err := service.Start(exec.Command(self, "--serve-peer", "127.0.0.1:0"))
	if err != nil {
		log.Fatal(err)
	}
	return p
}

// peerReply is an operation handle of the size the service answers with.
var peerReply = []byte(`{"id":"wto_00000000000000000000000000000000","session_id":"wts_00000000000000000000000000000000","run_id":"wtr_00000000000000000000000000000000","seq_id":1,"kind":"forward","status":"pending","result":null,"error_code":null,"error_message":null,"progress":null,"progress_updated_at":null,"created_at":"2026-11-21T00:00:00.000000000Z","updated_at":"2026-11-21T00:00:00.000000000Z"}`)

// servePeer answers every request with a fixed 202 after reading its body.
func servePeer(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "listening on http://%s\n", ln.Addr())
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if len(ctx.PostBody()) == 0 || !bytes.HasPrefix(ctx.Request.Header.Peek("Authorization"), []byte("Bearer ")) {
			ctx.SetStatusCode(400)
			return
		}
		ctx.SetStatusCode(202)
		ctx.SetContentType("application/json")
		ctx.SetBody(peerReply)
	}}
	log.Fatal(srv.Serve(ln))
}
