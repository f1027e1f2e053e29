package harness

// The reports of the benchmarks outside this package, as they write them:
// Summary reads them back into one table.

// EngineReport is what bench/enginebench prints for one model: the
// engine's forward_backward and decode figures, and its decode peers'.
type EngineReport struct {
	Engine         string   `json:"engine"`
	Weights        string   `json:"base_weights,omitempty"` // f32 or bf16
	Model          string   `json:"model"`
	Threads        int      `json:"threads"`
	Tokens         int      `json:"tokens_per_step"`
	FwdBwdTokPerS  float64  `json:"fwd_bwd_tokens_per_s,omitempty"`
	DecodeTokPerS  float64  `json:"decode_tokens_per_s,omitempty"`
	BoundTokPerS   float64  `json:"decode_bandwidth_bound_tokens_per_s,omitempty"`
	Batch16TokPerS float64  `json:"decode_batch16_tokens_per_s,omitempty"`
	WeightBytes    int64    `json:"weight_bytes_per_token,omitempty"`
	BandwidthGBps  float64  `json:"measured_bandwidth_gb_per_s,omitempty"`
	DecodeOfBound  float64  `json:"decode_fraction_of_bound,omitempty"`
	Batch16Speedup float64  `json:"decode_batch16_speedup,omitempty"`
	Load           BaseLoad `json:"load"`
	// LlamaCpp is the llama.cpp peer on the same weights, by the GGUF's
	// element type; PyTorch the PyTorch peer; Ratios wts's decode figures
	// over theirs.
	LlamaCpp map[string]*DecodePeer `json:"llamacpp,omitempty"`
	PyTorch  *DecodePeer            `json:"pytorch_decode,omitempty"`
	Ratios   map[string]float64     `json:"ratios,omitempty"`
	Provenance
}

// BaseLoad is what loading the base took, as the executor loads one:
// wall time, the process's peak resident memory by the end of it, and the
// memory the loaded weights take (transformer.Model.WeightBytes).
type BaseLoad struct {
	Seconds       float64 `json:"seconds"`
	PeakRSSBytes  int64   `json:"peak_rss_bytes,omitempty"`
	ResidentBytes int64   `json:"resident_weight_bytes"`
}

// DecodePeer is what a decode peer prints: bench/llamacpp/decode.mjs or
// bench/torch_decode.py.
type DecodePeer struct {
	Engine         string  `json:"engine"`
	SystemInfo     string  `json:"system_info,omitempty"`
	DecodeTokPerS  float64 `json:"decode_tokens_per_s"`
	Threads        int     `json:"threads"`
	Batch16TokPerS float64 `json:"decode_batch16_tokens_per_s"`
	Batch16Threads int     `json:"batch16_threads"`
	Greedy         []int   `json:"greedy_tokens,omitempty"`
	// GreedyAgree is how many of Greedy's first tokens wts's greedy
	// decoding of the same prompt gives too: the peer runs the same model.
	GreedyAgree int `json:"greedy_tokens_agree,omitempty"`
}

// TorchTrain is what bench/torch_train.py prints: PyTorch's LoRA
// forward_backward on the model enginebench trains.
type TorchTrain struct {
	Engine        string  `json:"engine"`
	Threads       int     `json:"threads"`
	FwdBwdTokPerS float64 `json:"fwd_bwd_tokens_per_s"`
}

// GEMMFigures is GFLOP/s by shape ("MxNxK"): `go test ./kernels/gemm
// -bench Sgemm/` as bench/run_engine.sh writes it, and bench/blas_gemm.py.
type GEMMFigures struct {
	Engine string             `json:"engine"`
	GFLOPS map[string]float64 `json:"gflops"`
}

// APIReport is what bench/apibench --json writes: durable submissions
// against the service and against a bare fasthttp handler, level by level.
type APIReport struct {
	Tokens int        `json:"tokens"` // in each submitted forward, on the tiny model
	Levels []APILevel `json:"levels"`
	Provenance
}

// APILevel is one level of an APIReport.
type APILevel struct {
	Clients   int     `json:"clients"`
	PerS      float64 `json:"submissions_per_s"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	PeerPerS  float64 `json:"peer_per_s"`
	PeerP99   float64 `json:"peer_p99_ms"`
	CPUMicros float64 `json:"cpu_us_per_submission,omitempty"`
	Errors    int     `json:"errors"` // the service's and the peer's
}
