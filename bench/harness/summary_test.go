package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Summary reads back what make bench writes and puts every peer and ratio
// in one table; a commit that differs from the others gets a column.
func TestSummary(t *testing.T) {
	dir := t.TempDir()
	if _, err := Summary(dir); err == nil {
		t.Fatal("an empty folder summarized")
	}
	prov := Provenance{Machine: "cpu, 2 logical cores", Commit: "abc", Command: "enginebench --model small", Started: "2026-01-01T00:00:00Z"}
	writeJSON(t, filepath.Join(dir, GEMMFile), GEMMFigures{GFLOPS: map[string]float64{"512x512x512": 100, "1024x1024x1024": 90}})
	writeJSON(t, filepath.Join(dir, OpenBLASFile), GEMMFigures{GFLOPS: map[string]float64{"512x512x512": 125, "1024x1024x1024": 90}})
	writeJSON(t, filepath.Join(dir, "engine-small.json"), EngineReport{Model: "data/small", Weights: "f32", Tokens: 512, FwdBwdTokPerS: 700,
		Load:          BaseLoad{Seconds: 2, PeakRSSBytes: 1.6e9, ResidentBytes: 1e9},
		DecodeTokPerS: 180, DecodeOfBound: 0.85, Batch16TokPerS: 1600, Batch16Speedup: 8.9, WeightBytes: 10,
		LlamaCpp: map[string]*DecodePeer{"f32": {DecodeTokPerS: 90, Batch16TokPerS: 160, Greedy: []int{1, 2}, GreedyAgree: 2},
			"f16": {DecodeTokPerS: 120, Batch16TokPerS: 200, Greedy: []int{1, 2}, GreedyAgree: 1}},
		Ratios:     map[string]float64{"decode_vs_llamacpp_f32": 2, "decode_vs_llamacpp_f16": 1.5, "batch16_vs_llamacpp_f32": 10, "batch16_vs_llamacpp_f16": 8},
		Provenance: prov})
	writeJSON(t, filepath.Join(dir, "engine-small-bf16.json"), EngineReport{Model: "data/small", Weights: "bf16",
		Load: BaseLoad{Seconds: 1, PeakRSSBytes: 0.8e9, ResidentBytes: 0.5e9}, Provenance: prov})
	writeJSON(t, filepath.Join(dir, "torch-train-small.json"), TorchTrain{Threads: 1, FwdBwdTokPerS: 560})
	p2 := prov
	p2.Commit, p2.Command = "def", "wts bench train"
	writeJSON(t, filepath.Join(dir, TrainDir, JSONFile), TrainReport{Model: "small", Batch: 4, Seq: 128,
		API: TrainFigures{TokensPerS: 600, Step: Quantiles{P50: 800}}, Engine: &TrainFigures{TokensPerS: 640}, Overhead: 600.0 / 640, Provenance: p2})
	writeJSON(t, filepath.Join(dir, SampleClosedDir, JSONFile), Report{Model: "small", Loop: Closed, Prompt: "16", Output: "32",
		Levels:   []Level{{Load: 1, Adapters: 1, TokensPerS: 160, TTFT: Quantiles{P50: 16}, ITL: Quantiles{P50: 5.5}}, {Load: 4, Adapters: 4, TokensPerS: 280, Errors: 2}},
		Baseline: &Engine{TokensPerS: 200, TTFT: 10, ITL: 5}, Provenance: prov})
	writeJSON(t, filepath.Join(dir, APIFile), APIReport{Tokens: 16, Levels: []APILevel{{Clients: 64, PerS: 3000, P50: 15, P99: 40, PeerPerS: 30000, PeerP99: 9, CPUMicros: 400}}, Provenance: prov})
	md, err := Summary(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| fp32 GEMM GFLOP/s, 2 projection shapes of the models | 90–100 | OpenBLAS 90–125 | 0.80–1.00×, shape by shape | abc |",
		"| LoRA forward_backward tokens/s, `small`, 512 tokens a step | 700 | PyTorch 560 (1 thread) | 1.25× | abc |",
		"| decode tokens/s, one stream, `small` | 180, 0.85 of the bandwidth bound | llama.cpp F32 90.0; llama.cpp F16 120 (greedy tokens: 1 of 2 agree) | 2.00×; 1.50× | abc |",
		"| decode tokens/s, 16 streams, `small` | 1,600 (8.9× one stream) | llama.cpp F32 160; llama.cpp F16 200 (greedy tokens: 1 of 2 agree) | 10.00×; 8.00× | abc |",
		"| base weights in memory, `small`, bf16 weights | 0.50 GB (loading: 1.0 s, peak RSS 0.80 GB) | float32 1.00 GB (loading: 2.0 s, peak RSS 1.60 GB) | 0.50× | abc |",
		"the engine alone, same batches: 640", "| 0.94× | def |",
		"| sampling through the API, 1 client, `small` (prompt 16, output 32 tokens) | 160 tokens/s; TTFT p50 16.0 ms",
		"| the engine alone, one stream: 200 tokens/s; TTFT 10.0 ms, ITL 5.0 ms | 0.80× | abc |",
		"4 clients, `small` (prompt 16, output 32 tokens) | 280 tokens/s;", "goodput 0.00/s; 2 errors |  |  | abc |",
		"| durable submissions, 64 clients (a 16-token forward on `tiny` each) | 3,000/s, p50 15.0 ms, p99 40.0 ms, 400 µs of CPU each | a bare fasthttp handler: 30,000/s, p99 9.0 ms | 0.10× | abc |",
		"- `bash bench/run_engine.sh`", "- `wts bench train`",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("summary lacks %q:\n%s", want, md)
		}
	}
	// One commit throughout: it moves to the heading.
	if err := os.RemoveAll(filepath.Join(dir, TrainDir)); err != nil {
		t.Fatal(err)
	}
	md, err = Summary(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md, "Commit: abc.") || strings.Contains(md, "| commit |") {
		t.Errorf("one commit, yet:\n%s", md)
	}
}
