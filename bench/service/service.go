// Package service starts and drives a real `wts serve` process, for the
// benchmark commands and the black-box tests: a data folder with a generated model and a key, the
// process on 127.0.0.1, and the few API calls a benchmark sets up with.
package service

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log"
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

	"github.com/wts-project/wts/http/client"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/providers"
)

// Process is a server a benchmark started.
type Process struct {
	cmd      *exec.Cmd
	Addr     string
	Key      string
	Model    string // the catalog name of its model
	Revision string
	ModelDir string

	mu   sync.Mutex
	logs []string // its standard error, the last logKeep lines
}

// logKeep bounds the lines of standard error a Process keeps.
const logKeep = 20000

// Log is what the process wrote to standard error (its last logKeep
// lines).
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.logs, "\n")
}

// Stop ends the process (SIGTERM, then waits).
func (p *Process) Stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.cmd.Wait()
}

// Kill ends the process as a crash would (SIGKILL), and waits.
func (p *Process) Kill() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// Pause stops the process in its tracks (SIGSTOP), as a long stall or a
// network partition looks from outside; Resume lets it go on (SIGCONT).
func (p *Process) Pause() error  { return p.cmd.Process.Signal(syscall.SIGSTOP) }
func (p *Process) Resume() error { return p.cmd.Process.Signal(syscall.SIGCONT) }

var listening = regexp.MustCompile(`listening on http://(\S+)`)

// Start runs cmd and waits (up to a minute) for the line on its standard
// error that names its address.
func Start(cmd *exec.Cmd) (*Process, error) {
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	found := make(chan string, 1)
	ended := make(chan struct{}) // its standard error closed: it exited
	p := &Process{cmd: cmd}
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			if p.logs = append(p.logs, line); len(p.logs) > logKeep {
				p.logs = p.logs[len(p.logs)-logKeep:]
			}
			p.mu.Unlock()
			if m := listening.FindStringSubmatch(line); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case addr := <-found:
		p.Addr = addr
		return p, nil
	case <-ended:
		cmd.Wait()
		return nil, fmt.Errorf("%s exited before it listened:\n%s", cmd.Path, p.Log())
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		return nil, fmt.Errorf("%s did not start in a minute", cmd.Path)
	}
}

// Build builds the wts binary into a temporary file unless wts names one.
func Build(wts string) string {
	if wts != "" {
		return wts
	}
	wts = filepath.Join(os.TempDir(), "wts-bench")
	if out, err := exec.Command("go", "build", "-o", wts, "./cmd/wts").CombinedOutput(); err != nil {
		log.Fatalf("build wts: %v\n%s", err, out)
	}
	return wts
}

// Credit grants org enough credit on a node's ledger (running or not) that
// a benchmark's sessions, each reserving up to 100 USD, never meet the
// credit floor. A binary from before the ledger has no such command, and
// no floor.
func Credit(wts, data, org string) {
	out, err := exec.Command(wts, "orgs", "credit", "--org", org, "--microusd", "1000000000000", "--data", data).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "unknown command") {
		log.Fatalf("orgs credit: %v\n%s", err, out)
	}
}

// Serve generates the preset model under data, creates a key, and starts
// `wts serve` at warn level (a log line per request would be measured too)
// with the extra flags.
func Serve(wts, data, preset string, extra ...string) *Process {
	dir, rev := Prepare(data, preset)
	out, err := exec.Command(wts, "keys", "create", "--org", "bench", "--data", data).Output()
	if err != nil {
		log.Fatalf("keys create: %v", err)
	}
	Credit(wts, data, "bench")
	args := append([]string{"serve", "--data", data, "--addr", "127.0.0.1:0", "--model", preset + "=" + dir, "--log-level", "warn"}, extra...)
	p, err := Start(exec.Command(wts, args...))
	if err != nil {
		log.Fatal(err)
	}
	p.Key, p.Model, p.Revision, p.ModelDir = strings.TrimSpace(string(out)), preset, rev, dir
	return p
}

// Prepare empties the data folder and generates the preset model in it;
// it returns the model's folder and its revision.
func Prepare(data, preset string) (dir, revision string) {
	os.RemoveAll(data)
	dir = filepath.Join(data, preset)
	if err := model.Generate(preset, 1, dir, safetensors.F32); err != nil {
		log.Fatal(err)
	}
	revision, err := providers.Revision(dir)
	if err != nil {
		log.Fatal(err)
	}
	return dir, revision
}

// Call sends a JSON request and decodes the JSON answer, which must have
// status want.
func (p *Process) Call(method, path string, body any, want int) map[string]any {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + p.Addr + path)
	req.Header.SetMethod(method)
	req.Header.Set("Authorization", "Bearer "+p.Key)
	if body != nil {
		raw, ok := body.([]byte)
		if !ok {
			raw, _ = json.Marshal(body)
		}
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(raw)
	}
	if err := fasthttp.DoTimeout(req, resp, time.Minute); err != nil || resp.StatusCode() != want {
		log.Fatalf("%s %s: %v %d %s", method, path, err, resp.StatusCode(), resp.Body())
	}
	var v map[string]any
	json.Unmarshal(resp.Body(), &v)
	return v
}

// Client is the Go client of the process, with opts.
func (p *Process) Client(opts ...client.Option) *client.Client {
	return client.New("http://"+p.Addr, p.Key, opts...)
}

// Runs opens n sessions, each with its run of rank-r LoRA, and returns the
// runs' training clients.
func (p *Process) Runs(n, rank int, opts ...client.Option) []*client.TrainingClient {
	c := p.Client(opts...)
	out := make([]*client.TrainingClient, n)
	for i := range out {
		s, err := c.CreateSession(context.Background(), client.SessionOptions{})
		if err != nil {
			log.Fatal(err)
		}
		if out[i], err = c.CreateLoRATrainingClient(context.Background(), s.ID, client.TrainingOptions{
			BaseModel: p.Model, ModelRevision: p.Revision, LoRA: client.LoRA{Rank: rank}}); err != nil {
			log.Fatal(err)
		}
	}
	return out
}

// Operation is an operation body with its correct request_hash, for the
// load generators that send it with fasthttp themselves.
func Operation(seq int, key, kind string, payload any) []byte {
	body, err := client.OperationBody(int64(seq), key, kind, payload)
	if err != nil {
		log.Fatal(err)
	}
	return body
}

// Scrape reads the service's Prometheus samples, each metric summed over
// its labels.
func (p *Process) Scrape() map[string]float64 {
	_, body, err := fasthttp.Get(nil, "http://"+p.Addr+"/metrics")
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

// WaitExecuted waits until the executors have run every accepted operation.
func (p *Process) WaitExecuted() {
	for {
		m := p.Scrape()
		if m["wts_operations_executed_total"] >= m["wts_operations_accepted_total"] {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CPU is the processor time (user and system, all threads) the process has
// used so far, read from /proc; ok is false where there is none. Unlike a
// rate, CPU per operation hardly moves with what else the machine runs, so
// it is the figure to compare builds by on a shared machine.
func (p *Process) CPU() (used time.Duration, ok bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, false
	}
	// Fields after the command name, which may hold spaces, in parentheses:
	// utime and stime are the 12th and 13th, in clock ticks (USER_HZ, 100
	// on Linux everywhere).
	rest := raw[strings.LastIndexByte(string(raw), ')')+1:]
	f := strings.Fields(string(rest))
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, true
}

// Levels parses a comma-separated list of concurrency levels.
func Levels(list string) []int {
	var levels []int
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			log.Fatalf("bad concurrency level %q", s)
		}
		levels = append(levels, n)
	}
	return levels
}

// Percentile is the q-quantile of sorted durations, in milliseconds.
func Percentile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(q*float64(len(sorted)-1))].Microseconds()) / 1000
}

// Clients runs c clients at once, client i measuring its own latencies in
// do(i), and returns all of them sorted, with the wall time of the whole.
func Clients(c int, do func(i int) []time.Duration) ([]time.Duration, time.Duration) {
	lat := make([][]time.Duration, c)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat[i] = do(i)
		}()
	}
	wg.Wait()
	took := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	return all, took
}
