// Command enginebench measures the compute engine on a generated model:
// LoRA forward_backward tokens/s, single-stream decode tokens/s against the
// memory-bandwidth bound, and batched decode throughput; with --llamacpp,
// llama.cpp decoding the same weights in the same run, and the ratios.
// bench/run_engine.sh runs it beside the PyTorch peer (bench/torch_train.py)
// on the same model.
//
//	go run ./bench/enginebench --model DIR [--batch 4 --seq 128 --rank 16 --iters 5] [--llamacpp bench/llamacpp]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/wts-project/wts/bench/harness"
	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/gguf"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/loss"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/rng"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/train"
	"github.com/wts-project/wts/kernels/transformer"
)

// runPeer runs a decode peer's command and reads what it prints; a peer
// that measured nothing ends the benchmark.
func runPeer(name string, arg ...string) *harness.DecodePeer {
	cmd := exec.Command(name, arg...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	check(err)
	var p harness.DecodePeer
	check(json.Unmarshal(out, &p))
	if p.DecodeTokPerS <= 0 || p.Batch16TokPerS <= 0 {
		check(fmt.Errorf("the peer measured nothing: %s", out))
	}
	return &p
}

// setRatios records wts's decode figures over a peer's under key.
func setRatios(rep *harness.EngineReport, key string, p *harness.DecodePeer) {
	rep.Ratios["decode_vs_"+key] = rep.DecodeTokPerS / p.DecodeTokPerS
	if rep.Batch16TokPerS > 0 {
		rep.Ratios["batch16_vs_"+key] = rep.Batch16TokPerS / p.Batch16TokPerS
	}
}

// agree counts how many of the peer's first greedy tokens wts's greedy
// decoding of the peers' prompt (3 + 7i mod 50) gives too.
func agree(m *transformer.Model[float32], p *harness.DecodePeer, prompt int) {
	if len(p.Greedy) == 0 {
		return
	}
	ids := make([]int, prompt)
	for i := range ids {
		ids[i] = 3 + i*7%50
	}
	st, err := sampler.Start(sampler.OnCPU(m), nil, sampler.Request{Prompt: ids, NumSamples: 1, Params: sampler.Params{MaxTokens: len(p.Greedy), Temperature: 0, TopP: 1, TopK: -1}})
	check(err)
	for !st.Done() {
		check(sampler.Step([]*sampler.Stream{st}))
	}
	mine := st.Result().Sequences[0].Tokens
	for p.GreedyAgree < min(len(mine), len(p.Greedy)) && mine[p.GreedyAgree] == p.Greedy[p.GreedyAgree] {
		p.GreedyAgree++
	}
}

// torchPeer runs bench/torch_decode.py with the interpreter py (Debian's
// python3-torch) on the model folder dir, and checks its greedy tokens
// against wts's.
func torchPeer(rep *harness.EngineReport, m *transformer.Model[float32], py, dir string, prompt, decode, rounds int) {
	p := runPeer(py, "bench/torch_decode.py", "--model", dir, "--prompt", strconv.Itoa(prompt), "--decode", strconv.Itoa(decode), "--rounds", strconv.Itoa(rounds))
	agree(m, p, prompt)
	rep.PyTorch = p
	setRatios(rep, "pytorch", p)
}

// llamaCpp runs the llama.cpp peer (the folder of bench/llamacpp, its
// node_modules installed) on the model folder dir exported as GGUF with
// each element type, checks its greedy tokens against wts's (on m), and
// sets the report's ratios against each.
func llamaCpp(rep *harness.EngineReport, m *transformer.Model[float32], peerDir, dir string, prompt, decode, rounds int) {
	rep.LlamaCpp = map[string]*harness.DecodePeer{}
	tmp, err := os.MkdirTemp("", "enginebench-gguf-")
	check(err)
	defer os.RemoveAll(tmp)
	for name, dt := range map[string]uint32{"f32": gguf.F32, "f16": gguf.F16, "bf16": gguf.BF16} {
		file := filepath.Join(tmp, name+".gguf")
		check(gguf.Export(dir, dt, file))
		p := runPeer("node", filepath.Join(peerDir, "decode.mjs"), "--model", file,
			"--prompt", strconv.Itoa(prompt), "--decode", strconv.Itoa(decode), "--rounds", strconv.Itoa(rounds))
		if runtime.GOARCH == "amd64" && !strings.Contains(p.SystemInfo, "AVX2 = 1") {
			check(fmt.Errorf("the llama.cpp peer runs without AVX2 (%s): no ratio against a crippled peer", p.SystemInfo))
		}
		agree(m, p, prompt)
		rep.LlamaCpp[name] = p
		setRatios(rep, "llamacpp_"+name, p)
	}
}

func main() {
	dir := flag.String("model", "", "HF model folder (wts model init)")
	batch := flag.Int("batch", 4, "sequences per forward_backward")
	seq := flag.Int("seq", 128, "tokens per sequence")
	rank := flag.Int("rank", 16, "LoRA rank (all attention and MLP projections)")
	iters := flag.Int("iters", 5, "timed iterations (median reported)")
	decode := flag.Int("decode", 64, "tokens to decode in the sampling runs (0 skips them)")
	profile := flag.String("cpuprofile", "", "write a CPU profile here")
	skipTrain := flag.Bool("decode-only", false, "skip the forward_backward run")
	batched := flag.Bool("batched", true, "also run the 16-sequence decode")
	rounds := flag.Int("rounds", 5, "decode rounds, each beside its own bandwidth reading (medians reported)")
	promptLen := flag.Int("prompt", 16, "prompt tokens before each decode run (its prefill is not timed)")
	peerDir := flag.String("llamacpp", "", "bench/llamacpp with its node_modules: also decode the same weights with llama.cpp (as GGUF: F32, F16 and BF16) and report the ratios")
	weights := flag.String("weights", "f32", "how the base weights are kept: f32, or bf16 or f16 (transformer.Options.Half); the peers read theirs as before")
	torchPy := flag.String("torch", "", "a python3 with torch: also decode the same weights with PyTorch (bench/torch_decode.py, run from the repository's root) and report the ratios")
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *dir == "" || *rounds < 1 || *decode == 1 {
		fmt.Fprintln(os.Stderr, "enginebench: --model is required, --rounds must be at least 1, and --decode 0 or at least 2")
		os.Exit(2)
	}
	start := time.Now()
	f, err := model.Open(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	half, ok := map[string]gemm.Half{"f32": 0, "bf16": gemm.BF16, "f16": gemm.F16}[*weights]
	if !ok {
		fmt.Fprintln(os.Stderr, "enginebench: --weights is f32, bf16 or f16")
		os.Exit(2)
	}
	m, err := transformer.Load(f, transformer.Options{Half: half}) // as the executor loads a base
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	load := harness.BaseLoad{Seconds: time.Since(start).Seconds(), PeakRSSBytes: peakRSS(), ResidentBytes: m.WeightBytes()}
	w := m.W
	cfg := lora.Config{Rank: *rank, Alpha: 32, Seed: 1}
	cfg.Targets(true, true, false)
	ad, _ := lora.New(w.Cfg, cfg)
	eng := sampler.OnCPU(m)
	z := eng.Freeze(ad) // the sampling runs' adapter snapshot
	tr := train.NewTrainer(m, ad)
	r := rng.New(1)
	var data []train.Datum
	for i := 0; i < *batch; i++ {
		toks := make([]int, *seq+1)
		for j := range toks {
			toks[j] = int(r.Uint64() % uint64(w.Cfg.Vocab))
		}
		data = append(data, train.Datum{ModelInput: toks[:*seq], Loss: loss.Inputs{TargetTokens: toks[1:]}})
	}
	rep := harness.EngineReport{Engine: "wts", Model: *dir, Threads: runtime.GOMAXPROCS(0), Tokens: *batch * *seq, Load: load, Provenance: harness.Begin()}
	if !*skipTrain {
		rep.FwdBwdTokPerS = float64(rep.Tokens) / median(*iters, func() {
			_, err := tr.ForwardBackward(context.Background(), data, "cross_entropy", nil)
			check(err)
		})
	}
	if *decode > 0 {
		prompt := make([]int, *promptLen)
		for i := range prompt {
			prompt[i] = int(r.Uint64() % uint64(w.Cfg.Vocab))
		}
		// decodeSecs times the decode steps of n samples of the prompt: the
		// prefill and the first token (sampler.Start) are not timed, so the
		// steps make decode-1 tokens a sample.
		decodeSecs := func(n int) float64 {
			st, err := sampler.Start(eng, z, sampler.Request{Prompt: prompt, NumSamples: n,
				Params: sampler.Params{MaxTokens: *decode, Temperature: 1, TopP: 1, TopK: -1}})
			check(err)
			t0 := time.Now()
			for !st.Done() {
				check(sampler.Step([]*sampler.Stream{st}))
			}
			return time.Since(t0).Seconds()
		}
		// Bytes of weights read per decoded token (LM head included, the
		// embedding row lookup not), at 4 bytes a weight (2 in 16 bits).
		elem := int64(4)
		if half != 0 {
			elem = 2
		}
		rep.WeightBytes = elem * int64(w.Cfg.ParamCount()) // a tied head counts once
		if !w.Cfg.TieEmbed {
			rep.WeightBytes -= elem * int64(w.Cfg.Vocab*w.Cfg.Hidden)
		}
		// The machine's bandwidth moves from minute to minute, so each
		// round decodes and then reads the stream buffer, and the ratios are
		// taken round by round.
		bw := newStream()
		decodeSecs(1) // warm-up: page faults, pools
		var single, bound, frac, batch16, speedup []float64
		for i := 0; i < *rounds; i++ {
			one := float64(*decode-1) / decodeSecs(1)
			gbps := bw.measure()
			b := gbps * 1e9 / float64(rep.WeightBytes)
			single, bound, frac = append(single, one), append(bound, b), append(frac, one/b)
			if *batched {
				many := float64(16*(*decode-1)) / decodeSecs(16)
				batch16, speedup = append(batch16, many), append(speedup, many/one)
			}
		}
		rep.DecodeTokPerS, rep.BoundTokPerS, rep.DecodeOfBound = mid(single), mid(bound), mid(frac)
		rep.BandwidthGBps = mid(bound) * float64(rep.WeightBytes) / 1e9
		if *batched {
			rep.Batch16TokPerS, rep.Batch16Speedup = mid(batch16), mid(speedup)
		}
	}
	rep.Weights = *weights
	rep.Ratios = map[string]float64{}
	if *peerDir != "" && *decode > 0 {
		llamaCpp(&rep, m, *peerDir, *dir, *promptLen, *decode, *rounds)
	}
	if *torchPy != "" && *decode > 0 {
		torchPeer(&rep, m, *torchPy, *dir, *promptLen, *decode, *rounds)
	}
	rep.Describe("enginebench " + strings.Join(os.Args[1:], " "))
	out, _ := json.MarshalIndent(rep, "", "  ")
	fmt.Println(string(out))
}

// peakRSS is the process's peak resident memory so far (Linux's VmHWM), 0
// where /proc does not tell.
func peakRSS() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// check ends the benchmark on an engine error: a figure measured around a
// failure would mean nothing.
func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "enginebench:", err)
		os.Exit(1)
	}
}

func median(n int, f func()) float64 {
	f() // warm-up: page faults, pools
	ts := make([]float64, n)
	for i := range ts {
		t0 := time.Now()
		f()
		ts[i] = time.Since(t0).Seconds()
	}
	sort.Float64s(ts)
	return ts[n/2]
}

// mid is the median of xs.
func mid(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
