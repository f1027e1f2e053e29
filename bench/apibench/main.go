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
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/wts-project/wts/http/jcs"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/providers"
)

func main() {
	clientsFlag := flag.String("clients", "1,16,64", "concurrent clients per level, comma-separated")
	requests := flag.Int("requests", 20000, "submissions per level (split evenly over the clients)")
	wts := flag.String("wts", "", "the wts binary (default: build it)")
	dataRoot := flag.String("data", "./build/apibench", "data folder (on the disk the service would use: fsync is measured)")
	tokens := flag.Int("tokens", 16, "tokens in each submitted forward")
	peerAddr := flag.String("serve-peer", "", "internal: serve the bare handler on this address")
	debugAddr := flag.String("debug-addr", "", "passed to wts serve: serve pprof there (to profile the service under load)")
	flag.Parse()
	if *peerAddr != "" {
		servePeer(*peerAddr)
		return
	}
	var levels []int
	for _, s := range strings.Split(*clientsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			log.Fatalf("--clients: bad level %q", s)
		}
		levels = append(levels, n)
	}
	if *wts == "" {
		*wts = filepath.Join(os.TempDir(), "wts-apibench")
		if out, err := exec.Command("go", "build", "-o", *wts, "./cmd/wts").CombinedOutput(); err != nil {
			log.Fatalf("build wts: %v\n%s", err, out)
		}
	}
	os.RemoveAll(*dataRoot)
	svc := startService(*wts, *dataRoot, *debugAddr)
	defer svc.stop()
	peer := startPeer()
	defer peer.stop()

	fmt.Printf("durable submissions, %d per level, forward of %d tokens on the tiny model; peer: bare fasthttp 202\n\n", *requests, *tokens)
	fmt.Printf("%8s | %12s %9s %9s | %12s %9s %9s | %s\n", "clients", "service/s", "p50 ms", "p99 ms", "peer/s", "p50 ms", "p99 ms", "service/peer")
	for _, c := range levels {
		per := max(1, *requests/c)
		runs := svc.runs(c)
		bodies := make([][][]byte, c)
		for i := range bodies {
			bodies[i] = make([][]byte, per)
			for j := range per {
				bodies[i][j] = opBody(j+1, fmt.Sprintf("k%d", j), *tokens, i+j)
			}
		}
		p := load(peer.addr, c, func(int) string { return "/v1/training/runs/x/operations" }, svc.key, bodies)
		before := svc.scrape()
		s := load(svc.addr, c, func(i int) string { return "/v1/training/runs/" + runs[i] + "/operations" }, svc.key, bodies)
		after := svc.scrape()
		svc.waitExecuted() // the next level starts on an idle executor
		fmt.Printf("%8d | %12.0f %9.2f %9.2f | %12.0f %9.2f %9.2f | %.2f\n", c, s.rate, s.p50, s.p99, p.rate, p.p50, p.p99, s.rate/p.rate)
		commits := after["wts_store_commits_total"] - before["wts_store_commits_total"]
		fmt.Printf("%8s   store: %.0f group commits, %.1f writes and %.1f pages each, %.2f ms each (fsync included)\n", "", commits,
			(after["wts_store_commit_writes_total"]-before["wts_store_commit_writes_total"])/commits,
			(after["wts_store_commit_pages_total"]-before["wts_store_commit_pages_total"])/commits,
			1000*(after["wts_store_commit_duration_seconds_sum"]-before["wts_store_commit_duration_seconds_sum"])/commits)
		if s.errors > 0 || p.errors > 0 {
			fmt.Printf("         errors: service %d (first: %s), peer %d\n", s.errors, s.firstError, p.errors)
		}
	}
}

// result is one level's measurement.
type result struct {
	rate, p50, p99 float64 // per second; milliseconds
	errors         int
	firstError     string
}

// load runs c clients, each posting its bodies in order and waiting for
// each answer before the next, and measures the whole.
func load(addr string, c int, path func(int) string, key string, bodies [][][]byte) result {
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: c, ReadTimeout: time.Minute, WriteTimeout: time.Minute}
	lat := make([][]time.Duration, c)
	var mu sync.Mutex
	var res result
	var wg sync.WaitGroup
	start := time.Now()
	for i := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://" + addr + path(i))
			req.Header.SetMethod("POST")
			req.Header.SetContentType("application/json")
			req.Header.Set("Authorization", "Bearer "+key)
			lat[i] = make([]time.Duration, 0, len(bodies[i]))
			for _, b := range bodies[i] {
				req.SetBodyRaw(b)
				t0 := time.Now()
				err := hc.Do(req, resp)
				lat[i] = append(lat[i], time.Since(t0))
				if err != nil || resp.StatusCode() != 202 {
					mu.Lock()
					if res.errors++; res.firstError == "" {
						res.firstError = fmt.Sprintf("%v %d %.200s", err, resp.StatusCode(), resp.Body())
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	ms := func(q float64) float64 { return float64(all[int(q*float64(len(all)-1))].Microseconds()) / 1000 }
	res.rate, res.p50, res.p99 = float64(len(all))/took.Seconds(), ms(0.50), ms(0.99)
	return res
}

// opBody is a forward submission with its correct request_hash.
func opBody(seq int, key string, tokens, salt int) []byte {
	ids := make([]int, tokens)
	for i := range ids {
		ids[i] = (salt*7 + i*5) % 64
	}
	env, _ := json.Marshal(map[string]any{"seq_id": seq, "idempotency_key": key, "kind": "forward", "payload": map[string]any{
		"data": []any{map[string]any{"model_input": map[string]any{"token_ids": ids}, "loss_fn_inputs": map[string]any{"target_tokens": ids}}}}})
	canon, err := jcs.Canonical(env, "")
	if err != nil {
		log.Fatal(err)
	}
	sum := sha256.Sum256(canon)
	return append(env[:len(env)-1], fmt.Sprintf(`,"request_hash":%q}`, hex.EncodeToString(sum[:]))...)
}

// process is a server the bench started.
type process struct {
	cmd      *exec.Cmd
	addr     string
	key      string
	revision string
}

func (p *process) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.cmd.Wait()
}

var listening = regexp.MustCompile(`listening on http://(\S+)`)

// start runs cmd and waits for the line that names its address.
func start(cmd *exec.Cmd) *process {
	stderr, err := cmd.StderrPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case addr := <-found:
		return &process{cmd: cmd, addr: addr}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		log.Fatalf("%s did not start", cmd.Path)
	}
	return nil
}

// startService generates the tiny model, creates a key, and starts `wts
// serve` at warn level (a log line per request would be measured too).
func startService(wts, data, debugAddr string) *process {
	dir := filepath.Join(data, "tiny")
	if err := model.Generate("tiny", 1, dir, safetensors.F32); err != nil {
		log.Fatal(err)
	}
	rev, err := providers.Revision(dir)
	if err != nil {
		log.Fatal(err)
	}
	out, err := exec.Command(wts, "keys", "create", "--org", "bench", "--data", data).Output()
	if err != nil {
		log.Fatalf("keys create: %v", err)
	}
	p := start(exec.Command(wts, "serve", "--data", data, "--addr", "127.0.0.1:0", "--model", "tiny="+dir, "--log-level", "warn", "--debug-addr", debugAddr))
	p.key, p.revision = strings.TrimSpace(string(out)), rev
	return p
}

// runs opens n sessions, each with its run, and returns the run ids.
func (p *process) runs(n int) []string {
	post := func(path string, body any) map[string]any {
		raw, _ := json.Marshal(body)
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + p.addr + path)
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		req.Header.Set("Authorization", "Bearer "+p.key)
		req.SetBodyRaw(raw)
		if err := fasthttp.Do(req, resp); err != nil || resp.StatusCode() != 201 {
			log.Fatalf("POST %s: %v %d %s", path, err, resp.StatusCode(), resp.Body())
		}
		var v map[string]any
		json.Unmarshal(resp.Body(), &v)
		return v
	}
	ids := make([]string, n)
	for i := range ids {
		s := post("/v1/training/sessions", map[string]any{"request_id": fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)})
		r := post("/v1/training/sessions/"+s["id"].(string)+"/runs", map[string]any{
			"request_id": "run", "base_model": "tiny", "model_revision": p.revision, "lora": map[string]any{"rank": 4}})
		ids[i] = r["id"].(string)
	}
	return ids
}

// scrape reads the service's Prometheus samples, each metric summed over
// its labels.
func (p *process) scrape() map[string]float64 {
	_, body, err := fasthttp.Get(nil, "http://"+p.addr+"/metrics")
	if err != nil {
		log.Fatal(err)
	}
	m := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line[:i], "{")
		v, _ := strconv.ParseFloat(line[i+1:], 64)
		m[name] += v
	}
	return m
}

// waitExecuted waits until the executor has run every accepted operation.
func (p *process) waitExecuted() {
	for {
		m := p.scrape()
		if m["wts_operations_executed_total"] >= m["wts_operations_accepted_total"] {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startPeer runs this binary as the bare handler, in its own process like
// the service.
func startPeer() *process {
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	return start(exec.Command(self, "--serve-peer", "127.0.0.1:0"))
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
