//go:build cuda

// Command gpubench measures the decode engine on a GPU (kernels/cuda):
// greedy decode tokens/s of one stream and of --streams streams, with bf16
// and f32 weights, each against the HBM bandwidth bound measured in the
// same run; with --torch, PyTorch decoding the same model folder on the
// same device (bench/torch_decode_cuda.py) and the ratios. Build it with
// -tags cuda after make cuda (bench/README.md).
//
//	gpubench --model DIR [--preset qwen3-0.6b] [--prompt 16 --decode 64 --streams 64 --rounds 3] [--torch python3] [--json FILE]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/wts-project/wts/bench/harness"
	"github.com/wts-project/wts/kernels/cuda"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
)

// figures is one weight type's decode figures.
type figures struct {
	Weights         string  `json:"weights"`
	Graphs          bool    `json:"cuda_graphs"`
	WeightBytes     int64   `json:"weight_bytes_per_step"`
	OneTokPerS      float64 `json:"decode_tokens_per_s"`
	OneOfBound      float64 `json:"decode_fraction_of_bound"`
	BatchTokPerS    float64 `json:"decode_batch_tokens_per_s"`
	BatchOfBound    float64 `json:"decode_batch_fraction_of_bound"` // of streams × the one-stream bound: weights read once a step
	Greedy          []int   `json:"greedy_tokens"`
	GreedyAgree     int     `json:"greedy_tokens_agree_with_torch,omitempty"`
	TorchOneRatio   float64 `json:"decode_vs_torch,omitempty"`
	TorchBatchRatio float64 `json:"batch_vs_torch,omitempty"`
}

type report struct {
	Device        cuda.Device     `json:"device"`
	BandwidthGBps float64         `json:"measured_bandwidth_gb_per_s"`
	Model         string          `json:"model"`
	Streams       int             `json:"streams"`
	Figures       []figures       `json:"figures"`
	Torch         json.RawMessage `json:"pytorch,omitempty"`
	harness.Provenance
}

// torchPeer is what bench/torch_decode_cuda.py prints.
type torchPeer struct {
	Engine    string  `json:"engine"`
	One       float64 `json:"decode_tokens_per_s"`
	OneMode   string  `json:"decode_mode"`
	Batch     float64 `json:"decode_batch_tokens_per_s"`
	BatchMode string  `json:"decode_batch_mode"`
	Greedy    []int   `json:"greedy_tokens"`
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpubench:", err)
		os.Exit(1)
	}
}

func main() {
	dir := flag.String("model", "", "HF model folder; one with no config.json gets --preset, generated (seed 1, bf16 weights)")
	preset := flag.String("preset", "qwen3-0.6b", "the generated model for a --model folder that has none")
	prompt := flag.Int("prompt", 16, "prompt tokens (their prefill and the first token are not timed)")
	decode := flag.Int("decode", 64, "tokens each stream decodes")
	streams := flag.Int("streams", 64, "streams decoded together in the batched runs")
	rounds := flag.Int("rounds", 3, "timed rounds (medians reported)")
	torchPy := flag.String("torch", "", "a python3 with CUDA PyTorch: also run bench/torch_decode_cuda.py on the same folder and device")
	jsonOut := flag.String("json", "", "also write the report here")
	flag.Parse()
	if *dir == "" || *decode < 2 || *streams < 1 || *rounds < 1 {
		fmt.Fprintln(os.Stderr, "gpubench: --model is required; --decode at least 2, --streams and --rounds at least 1")
		os.Exit(2)
	}
	if _, err := os.Stat(filepath.Join(*dir, "config.json")); err != nil {
		fail(model.Generate(*preset, 1, *dir, safetensors.BF16))
	}
	rep := report{Model: *dir, Streams: *streams, Provenance: harness.Begin()}
	ds, err := cuda.Devices()
	fail(err)
	if len(ds) == 0 {
		fail(fmt.Errorf("no CUDA device"))
	}
	rep.Device = ds[0]
	rep.BandwidthGBps, err = cuda.Bandwidth(0, 2<<30)
	fail(err)
	w, err := model.Load(*dir)
	fail(err)
	ids := make([]int, *prompt)
	for i := range ids {
		ids[i] = 3 + i*7%50 // the peers' prompt
	}
	for _, c := range []struct{ bf16, graphs bool }{{true, true}, {true, false}, {false, true}} {
		m, err := cuda.Load(w, nil, cuda.Options{BF16: c.bf16, Graphs: c.graphs, Slots: *streams, MaxLen: *prompt + *decode, MaxRows: max(*streams, *prompt)})
		fail(err)
		f := figures{Weights: "f32", Graphs: c.graphs, WeightBytes: m.WeightBytes}
		if c.bf16 {
			f.Weights = "bf16"
		}
		bound := rep.BandwidthGBps * 1e9 / float64(m.WeightBytes)
		run := func(n int) (float64, []int) { return decodeRun(m, ids, n, *decode) }
		run(1) // warm-up
		f.OneTokPerS = median(*rounds, func() float64 { s, _ := run(1); return float64(*decode-1) / s })
		f.BatchTokPerS = median(*rounds, func() float64 { s, _ := run(*streams); return float64(*streams*(*decode-1)) / s })
		f.OneOfBound, f.BatchOfBound = f.OneTokPerS/bound, f.BatchTokPerS/(bound*float64(*streams))
		_, f.Greedy = run(1)
		f.Greedy = f.Greedy[:min(16, len(f.Greedy))]
		m.Close()
		rep.Figures = append(rep.Figures, f)
	}
	if *torchPy != "" {
		cmd := exec.Command(*torchPy, "bench/torch_decode_cuda.py", "--model", *dir, "--prompt", strconv.Itoa(*prompt),
			"--decode", strconv.Itoa(*decode), "--streams", strconv.Itoa(*streams), "--rounds", strconv.Itoa(*rounds))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		fail(err)
		var p torchPeer
		fail(json.Unmarshal(out, &p))
		rep.Torch = out
		for i := range rep.Figures {
			f := &rep.Figures[i]
			f.TorchOneRatio, f.TorchBatchRatio = f.OneTokPerS/p.One, f.BatchTokPerS/p.Batch
			for f.GreedyAgree < min(len(f.Greedy), len(p.Greedy)) && f.Greedy[f.GreedyAgree] == p.Greedy[f.GreedyAgree] {
				f.GreedyAgree++
			}
		}
		defer fmt.Printf("\nPyTorch (%s): one stream %.0f tokens/s (%s), %d streams %.0f tokens/s (%s)\n", p.Engine, p.One, p.OneMode, *streams, p.Batch, p.BatchMode)
	}
	rep.Describe("gpubench " + strings.Join(os.Args[1:], " "))
	raw, _ := json.MarshalIndent(rep, "", "  ")
	if *jsonOut != "" {
		fail(os.WriteFile(*jsonOut, append(raw, '\n'), 0o644))
	}
	fmt.Println(string(raw))
	fmt.Printf("\n%s, %.0f GB/s measured; model %s\n\n", rep.Device.Name, rep.BandwidthGBps, *dir)
	fmt.Printf("| weights | CUDA graphs | one stream tokens/s | of bound | %d streams tokens/s | of bound | vs PyTorch (one; %d) | greedy tokens agreeing |\n|---|---|---|---|---|---|---|---|\n", *streams, *streams)
	for _, f := range rep.Figures {
		fmt.Printf("| %s | %v | %.0f | %.2f | %.0f | %.2f | %.2f×; %.2f× | %d of %d |\n", f.Weights, f.Graphs, f.OneTokPerS, f.OneOfBound, f.BatchTokPerS, f.BatchOfBound,
			f.TorchOneRatio, f.TorchBatchRatio, f.GreedyAgree, len(f.Greedy))
	}
}

// decodeRun prefills n streams (slots 0..n-1) with the prompt, then times
// decode-1 greedy steps of all n together: the seconds, and stream 0's
// tokens.
func decodeRun(m *cuda.Model, prompt []int, n, decode int) (float64, []int) {
	next := make([]int, n)
	for s := 0; s < n; s++ {
		slots, pos := make([]int, len(prompt)), make([]int, len(prompt))
		for i := range pos {
			slots[i], pos[i] = s, i
		}
		out, err := m.Step(prompt, slots, pos, nil)
		fail(err)
		next[s] = out[len(out)-1]
	}
	toks := []int{next[0]}
	slots, pos := make([]int, n), make([]int, n)
	for s := range slots {
		slots[s] = s
	}
	t0 := time.Now()
	for i := 0; i < decode-1; i++ {
		for s := range pos {
			pos[s] = len(prompt) + i
		}
		var err error
		next, err = m.Step(next, slots, pos, nil)
		fail(err)
		toks = append(toks, next[0])
	}
	return time.Since(t0).Seconds(), toks
}

func median(n int, f func() float64) float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = f()
	}
	sort.Float64s(xs)
	return xs[n/2]
}
