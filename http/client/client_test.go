package client_test

// These tests start the real wts binary on 127.0.0.1 with a tiny
// generated model and use the client against it.

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wts-project/wts/bench/service"
	"github.com/wts-project/wts/http/client"
	"github.com/wts-project/wts/http/jcs"
	"github.com/wts-project/wts/kernels/tokenizer"
)

var (
	bin    string           // where the binaries are built
	server *service.Process // the running wts
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wts-client")
	if err != nil {
		panic(err)
	}
	bin = dir
	for name, pkg := range map[string]string{"wts": "../../cmd/wts", "sft": "./examples/sft", "rl": "./examples/rl"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	server = service.Serve(filepath.Join(bin, "wts"), filepath.Join(dir, "data"), "tiny")
	code := m.Run()
	server.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

func newClient(opts ...client.Option) *client.Client {
	return client.New("http://"+server.Addr, server.Key, opts...)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// trainer opens a session and its run through c.
func trainer(t *testing.T, c *client.Client) *client.TrainingClient {
	t.Helper()
	sess, err := c.CreateSession(ctx(t), client.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseSession(context.Background(), sess.ID) })
	tc, err := c.CreateLoRATrainingClient(ctx(t), sess.ID, client.TrainingOptions{BaseModel: server.Model, LoRA: client.LoRA{Rank: 4, Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if tc.Run.ModelRevision != server.Revision {
		t.Fatalf("the client took revision %s from the catalog, not %s", tc.Run.ModelRevision, server.Revision)
	}
	return tc
}

// The examples documented in docs/clients.md reach their targets (on the
// tests' tiny model, with the learning rate it takes).
func TestExamples(t *testing.T) {
	for _, name := range []string{"sft", "rl"} {
		cmd := exec.Command(filepath.Join(bin, name), "--model", server.Model, "--lr", "2e-2")
		cmd.Env = append(os.Environ(), "WTS_URL=http://"+server.Addr, "WTS_API_KEY="+server.Key)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", name, err, out)
		}
	}
}

// The Python client's own suite (python/tests) runs against this package's
// server, with the client installed by pip from its folder into a fresh
// virtual environment with no package index (the tests are copied out, so
// they import the installed package).
func TestPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is needed (.ci/run installs it)")
		}
		t.Skip("no python3 here")
	}
	venv, work := t.TempDir(), t.TempDir()
	python := filepath.Join(venv, "bin", "python")
	for _, args := range [][]string{{py, "-m", "venv", venv}, {python, "-m", "pip", "install", "--no-index", "--quiet", "./python"}} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	for _, dir := range []string{"tests", "examples"} {
		if err := os.CopyFS(filepath.Join(work, dir), os.DirFS(filepath.Join("python", dir))); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("jcs", func(t *testing.T) { sameCanonical(t, python) })
	tok, err := tokenizer.Generated(8192) // the small preset's
	if err != nil {
		t.Fatal(err)
	}
	raw, err := tok.JSON()
	if err != nil {
		t.Fatal(err)
	}
	tokPath := filepath.Join(work, "tokenizer.json")
	if err := os.WriteFile(tokPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	golden, err := filepath.Abs(filepath.Join("..", "..", "kernels", "tokenizer", "testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "WTS_URL=http://"+server.Addr, "WTS_API_KEY="+server.Key, "WTS_MODEL="+server.Model,
		"WTS_TOKENIZER_JSON="+tokPath, "WTS_TOKENIZER_GOLDEN="+golden)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the Python client's tests: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "test_golden (tests.test_tokenizer.TestTokenizer") || strings.Contains(string(out), "skipped") {
		t.Fatalf("the Python client's tokenizer tests did not run:\n%s", out)
	}
}

// sameCanonical checks that the Python client's RFC 8785 form of random
// JSON values (floats of every magnitude, integers past 2^53, keys outside
// the BMP) is byte for byte the server's (http/jcs), so that its
// request_hash always matches.
func sameCanonical(t *testing.T, python string) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "\u20ac", "\U0001F600", "\ufb33", "é", "A", "payload", ""}
	var value func(depth int) any
	value = func(depth int) any {
		switch k := rng.IntN(9); {
		case k == 0 && depth < 3:
			m := map[string]any{}
			for range rng.IntN(4) {
				m[keys[rng.IntN(len(keys))]] = value(depth + 1)
			}
			return m
		case k == 1 && depth < 3:
			l := make([]any, rng.IntN(4))
			for i := range l {
				l[i] = value(depth + 1)
			}
			return l
		case k == 2:
			return rng.Int64() >> rng.IntN(64)
		case k == 3:
			return float64(rng.IntN(2000)-1000) * math.Pow10(rng.IntN(60)-30)
		case k == 4:
			return keys[rng.IntN(len(keys))] + "\n\x01\"\\"
		default:
			f := math.Float64frombits(rng.Uint64())
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return 1.5
			}
			return f
		}
	}
	var in bytes.Buffer
	var want [][]byte
	for range 3000 {
		raw, err := json.Marshal(value(0))
		if err != nil {
			t.Fatal(err)
		}
		c, err := jcs.Canonical(raw, "")
		if err != nil {
			t.Fatal(err)
		}
		in.Write(append(raw, '\n'))
		want = append(want, c)
	}
	cmd := exec.Command(python, "-c", `import json, sys
from wts_client.jcs import canonicalize
for line in sys.stdin:
    sys.stdout.write(canonicalize(json.loads(line)).hex() + "\n")`)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(out))
	if len(got) != len(want) {
		t.Fatalf("%d answers for %d values", len(got), len(want))
	}
	for i := range want {
		if got[i] != hex.EncodeToString(want[i]) {
			g, _ := hex.DecodeString(got[i])
			t.Fatalf("value %d: Python %s, the server %s", i, g, want[i])
		}
	}
}

// A training loop's futures give each kind's result; a sampling client
// waits for the weight version it asks for.
func TestTrainAndSample(t *testing.T) {
	c := newClient()
	tc := trainer(t, c)
	data := []client.Datum{client.NextTokenDatum([]int{1, 5, 9, 13, 17}, nil)}
	fb, err := tc.ForwardBackward(ctx(t), data, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := tc.OptimStep(ctx(t), client.AdamParams{LearningRate: 1e-2})
	if err != nil {
		t.Fatal(err)
	}
	if fb.Op.SeqID != 1 || opt.Op.SeqID != 2 {
		t.Fatalf("seq_ids %d, %d", fb.Op.SeqID, opt.Op.SeqID)
	}
	out, err := fb.Result(ctx(t))
	if err != nil || len(out.LossFnOutputs) != 1 || len(out.LossFnOutputs[0].Logprobs) != 4 || out.Metrics["tokens:sum"] != 4 {
		t.Fatalf("forward_backward: %+v %v", out, err)
	}
	if o, err := opt.Result(ctx(t)); err != nil || o.Metrics["step"] != 1 {
		t.Fatalf("optim_step: %+v %v", o, err)
	}
	ck, err := tc.SaveState(ctx(t), "first")
	if err != nil {
		t.Fatal(err)
	}
	w, err := tc.SaveWeightsForSampler(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := ck.Result(ctx(t)); err != nil || !strings.HasPrefix(r.CheckpointID, "wtc_") || r.Step != 1 {
		t.Fatalf("save_state: %+v %v", r, err)
	}
	wr, err := w.Result(ctx(t))
	if err != nil || wr.WeightVersion != 1 {
		t.Fatalf("save_weights_for_sampler: %+v %v", wr, err)
	}
	sc, err := tc.SamplingClient(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	seed := int64(3)
	sf, err := sc.Sample(ctx(t), client.SampleRequest{Prompt: client.ModelInput{TokenIDs: []int{1, 2}}, NumSamples: 2, RequiredWeightVersion: &wr.WeightVersion,
		Parameters: client.SamplingParams{MaxTokens: 4, Temperature: 1, TopP: 1, TopK: -1, Seed: &seed}})
	if err != nil {
		t.Fatal(err)
	}
	lf, err := sc.ComputeLogprobs(ctx(t), []int{1, 2, 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := sf.Result(ctx(t)); err != nil || len(s.Sequences) != 2 || s.WeightVersion != 1 || len(s.Sequences[0].Tokens) != len(s.Sequences[0].Logprobs) {
		t.Fatalf("sample: %+v %v", s, err)
	}
	if l, err := lf.Result(ctx(t)); err != nil || len(l.Logprobs) != 3 || l.Logprobs[0] != nil || l.Logprobs[1] == nil {
		t.Fatalf("logprobs: %+v %v", l, err)
	}
	runs, err := c.ListRuns(ctx(t), "", 1)
	if err != nil || len(runs.Items) != 1 || runs.NextAfter == nil || *runs.NextAfter != runs.Items[0].ID {
		t.Fatalf("the newest run: %+v %v", runs, err)
	}
	m, err := c.Metrics(ctx(t), tc.Run.ID, 0, 100)
	if err != nil || m.Summary["loss:sum"].Count != 1 {
		t.Fatalf("metrics: %+v %v", m, err)
	}
	// A second client resumes the run at its next seq_id.
	again, err := c.TrainingClient(ctx(t), tc.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := again.Forward(ctx(t), data, "", nil); err != nil || f.Op.SeqID != 5 {
		t.Fatalf("resumed client: %+v %v", f, err)
	}
}

// Refusals are errors with the envelope's code; an operation that failed
// is an OperationError with the operation's.
func TestErrors(t *testing.T) {
	c := newClient()
	if _, err := c.CreateSession(ctx(t), client.SessionOptions{IdleTTLSeconds: 5}); !client.IsCode(err, "validation_error") {
		t.Fatalf("a lease of 5 s: %v", err)
	}
	if _, err := c.CreateLoRATrainingClient(ctx(t), "wts_0123456789abcdef0123456789abcdef", client.TrainingOptions{BaseModel: "nope"}); !client.IsCode(err, "model_not_available") {
		t.Fatalf("a model not in the catalog: %v", err)
	}
	if _, err := c.Tokenizer(ctx(t), server.Model); !client.IsCode(err, "not_found") {
		t.Fatalf("the tokenizer of a model without one: %v", err)
	}
	if _, err := client.New("http://"+server.Addr, "svc_test_nope").Models(ctx(t)); !client.IsCode(err, "unauthorized") {
		t.Fatalf("a wrong key: %v", err)
	}
	tc := trainer(t, c)
	if _, err := tc.ForwardBackward(ctx(t), []client.Datum{client.NextTokenDatum([]int{1, 500}, nil)}, "", nil); !client.IsCode(err, "token_out_of_range") {
		t.Fatalf("a token outside the vocabulary: %v", err)
	}
	// The refusal took no seq_id: the next operation is 1.
	f, err := tc.LoadState(ctx(t), "wtc_0123456789abcdef0123456789abcdef", false)
	if err == nil {
		_, err = f.Result(ctx(t))
	}
	var e *client.Error
	if !errors.As(err, &e) || e.Code != "checkpoint_not_found" || e.RequestID == "" {
		t.Fatalf("loading a checkpoint that does not exist: %v", err)
	}
}

// dropFirst loses the answer to the first POST of each operation
// submission after the server took it, as a connection cut would.
type dropFirst struct {
	seen atomic.Int32
}

func (d *dropFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/operations") && d.seen.Add(1)%2 == 1 {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("connection reset (test)")
	}
	return resp, err
}

// A submission whose answer was lost is sent again with the same key and
// hash: the service returns the operation it took, and applies it once.
func TestRetryIsSafe(t *testing.T) {
	c := newClient(client.WithHTTPClient(&http.Client{Transport: &dropFirst{}}), client.WithRetry(client.Retry{Attempts: 3, Initial: time.Millisecond, Max: time.Millisecond}))
	tc := trainer(t, c)
	data := []client.Datum{client.NextTokenDatum([]int{1, 5, 9}, nil)}
	var ids []string
	for range 3 {
		f, err := tc.ForwardBackward(ctx(t), data, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Result(ctx(t)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, f.Op.ID)
	}
	r, err := c.GetRun(ctx(t), tc.Run.ID)
	if err != nil || r.NextSeqID != 4 {
		t.Fatalf("three submissions, each sent twice, took seq_ids to %d: %v", r.NextSeqID, err)
	}
	if ids[0] == ids[1] || ids[1] == ids[2] {
		t.Fatalf("operations %v", ids)
	}
}

// A 429 is waited out for its Retry-After, a 503 with backoff; a 4xx is
// not retried.
func TestRetryAfter(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
			io.WriteString(w, `{"error":{"code":"queue_full","message":"full"},"request_id":"req_1"}`)
		case 2:
			w.WriteHeader(503)
			io.WriteString(w, `{"error":{"code":"unavailable","message":"restarting"},"request_id":"req_2"}`)
		default:
			io.WriteString(w, `{"items":[{"name":"m","revision":"abc"}]}`)
		}
	}))
	defer srv.Close()
	start := time.Now()
	models, err := client.New(srv.URL, "k").Models(ctx(t))
	if err != nil || len(models) != 1 || calls.Load() != 3 || time.Since(start) < time.Second {
		t.Fatalf("after a 429 and a 503: %+v %v, %d calls in %v", models, err, calls.Load(), time.Since(start))
	}
	calls.Store(10)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(422)
		io.WriteString(w, `{"error":{"code":"validation_error","message":"no"},"request_id":"req_3"}`)
	})
	if _, err := client.New(srv.URL, "k").Models(ctx(t)); !client.IsCode(err, "validation_error") || calls.Load() != 11 {
		t.Fatalf("a 422: %v after %d calls", err, calls.Load()-10)
	}
}
