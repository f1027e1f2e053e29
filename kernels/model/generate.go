package model

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/wts-project/wts/kernels/rng"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/kernels/tokenizer"
)

// Presets are the shapes the generator knows. tiny* are for unit tests (one
// per family, so every code path has a fast test model); small is the
// embedded service's default (~25M parameters); the last two are the exact
// shapes of the public checkpoints, with random weights, for benchmarks.
var Presets = map[string]Config{
	"tiny": {ModelType: "llama", Vocab: 96, Hidden: 32, Intermediate: 64, Layers: 2, Heads: 4, KVHeads: 2,
		HeadDim: 8, MaxPos: 128, RMSEps: 1e-5, RopeTheta: 10000, BOS: 1, EOS: 2},
	"tiny-qwen2": {ModelType: "qwen2", Vocab: 96, Hidden: 32, Intermediate: 64, Layers: 2, Heads: 4, KVHeads: 2,
		HeadDim: 8, MaxPos: 128, RMSEps: 1e-6, RopeTheta: 1e6, QKVBias: true, TieEmbed: true, BOS: 1, EOS: 2},
	"tiny-qwen3": {ModelType: "qwen3", Vocab: 96, Hidden: 32, Intermediate: 64, Layers: 2, Heads: 4, KVHeads: 1,
		HeadDim: 16, MaxPos: 128, RMSEps: 1e-6, RopeTheta: 1e6, QKNorm: true, TieEmbed: true, BOS: 1, EOS: 2},
	"tiny-llama3": {ModelType: "llama", Vocab: 96, Hidden: 32, Intermediate: 64, Layers: 2, Heads: 4, KVHeads: 1,
		HeadDim: 16, MaxPos: 512, RMSEps: 1e-5, RopeTheta: 500000, TieEmbed: true, BOS: 1, EOS: 2,
		RopeScaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPosition: 64}},
	"small": {ModelType: "llama", Vocab: 8192, Hidden: 512, Intermediate: 1280, Layers: 8, Heads: 8, KVHeads: 4,
		HeadDim: 64, MaxPos: 4096, RMSEps: 1e-5, RopeTheta: 10000, TieEmbed: true, BOS: 1, EOS: 2},
	"qwen3-0.6b": {ModelType: "qwen3", Vocab: 151936, Hidden: 1024, Intermediate: 3072, Layers: 28, Heads: 16,
		KVHeads: 8, HeadDim: 128, MaxPos: 40960, RMSEps: 1e-6, RopeTheta: 1e6, QKNorm: true, TieEmbed: true,
		BOS: 151643, EOS: 151645},
	"llama-3.2-1b": {ModelType: "llama", Vocab: 128256, Hidden: 2048, Intermediate: 8192, Layers: 16, Heads: 32,
		KVHeads: 8, HeadDim: 64, MaxPos: 131072, RMSEps: 1e-5, RopeTheta: 500000, TieEmbed: true, BOS: 128000, EOS: 128001,
		RopeScaling: &RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPosition: 8192}},
}

// PresetNames lists the presets in a stable order, for help text.
func PresetNames() []string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// shardBytes bounds one safetensors shard, like save_pretrained's
// max_shard_size, so the big presets exercise the sharded layout.
const shardBytes = 2 << 30

// Random fills a model with deterministic weights: each tensor draws from its
// own stream keyed by (seed, tensor name), uniform with the standard deviation
// HF uses (0.02) for matrices, 1±0.1 for norm gains (not exactly 1, so that a
// forgotten gain shows up in tests) and ±0.02 for biases.
func Random(cfg Config, seed uint64) (*Weights[float32], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &Weights[float32]{Cfg: cfg}
	for _, sp := range w.specs() {
		n := 1
		for _, d := range sp.shape {
			n *= d
		}
		r := rng.Derive(seed, rng.HashString(sp.name))
		data := make([]float32, n)
		for i := range data {
			switch sp.init {
			case initLinear:
				data[i] = float32(r.Uniform(-1, 1) * 0.02 * math.Sqrt(3))
			case initNorm:
				data[i] = float32(1 + r.Uniform(-0.1, 0.1))
			case initBias:
				data[i] = float32(r.Uniform(-0.02, 0.02))
			}
		}
		*sp.dst = data
	}
	if cfg.TieEmbed {
		w.LMHead = w.Embed
	}
	return w, nil
}

// Save writes an HF-layout folder (config.json and safetensors, sharded with
// an index past shardBytes) with the weights stored as dtype.
func (w *Weights[F]) Save(dir string, dtype safetensors.DType) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfgJSON, err := w.Cfg.HFJSON()
	if err != nil {
		return err
	}
	if dtype != safetensors.F32 { // record what is on disk, as save_pretrained does
		var m map[string]any
		json.Unmarshal(cfgJSON, &m)
		m["torch_dtype"] = map[safetensors.DType]string{safetensors.BF16: "bfloat16", safetensors.F16: "float16"}[dtype]
		cfgJSON, _ = json.MarshalIndent(m, "", "  ")
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfgJSON, 0o644); err != nil {
		return err
	}
	var shards [][]safetensors.Tensor
	var cur []safetensors.Tensor
	size := 0
	for _, sp := range w.specs() {
		data := *sp.dst
		bytes := len(data) * dtype.Size()
		if size > 0 && size+bytes > shardBytes {
			shards, cur, size = append(shards, cur), nil, 0
		}
		cur = append(cur, safetensors.Tensor{Name: sp.name, DType: dtype, Shape: sp.shape, Data: toF32(data)})
		size += bytes
	}
	shards = append(shards, cur)
	if len(shards) == 1 {
		return safetensors.Write(filepath.Join(dir, "model.safetensors"), shards[0], map[string]string{"format": "pt"})
	}
	weightMap := map[string]string{}
	total := 0
	for i, sh := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		if err := safetensors.Write(filepath.Join(dir, name), sh, map[string]string{"format": "pt"}); err != nil {
			return err
		}
		for _, t := range sh {
			weightMap[t.Name] = name
			total += len(t.Data) * dtype.Size()
		}
	}
	idx, _ := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "  ")
	return os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644)
}

func toF32[F float32 | float64](s []F) []float32 {
	if f, ok := any(s).([]float32); ok {
		return f
	}
	out := make([]float32, len(s))
	for i, v := range s {
		out[i] = float32(v)
	}
	return out
}

// Generate writes preset name with the given seed to dir.
func Generate(name string, seed uint64, dir string, dtype safetensors.DType) error {
	cfg, ok := Presets[strings.ToLower(name)]
	if !ok {
		return fmt.Errorf("unknown preset %q (have %s)", name, strings.Join(PresetNames(), ", "))
	}
	w, err := Random(cfg, seed)
	if err != nil {
		return err
	}
	if err := w.Save(dir, dtype); err != nil {
		return err
	}
	return writeTokenizer(cfg, dir)
}

// writeTokenizer gives a generated model a generated tokenizer
// (tokenizer.Generated), so that text works with it: presets whose
// vocabulary holds the 256 bytes and whose BOS and EOS are the
// tokenizer's (the unit tests' tiny presets have neither; the public
// shapes keep their real tokens' ids, which a generated tokenizer would
// contradict).
func writeTokenizer(cfg Config, dir string) error {
	if cfg.Vocab < len(tokenizer.Specials)+256 || cfg.BOS != 1 || cfg.EOS != 2 {
		return nil
	}
	t, err := tokenizer.Generated(cfg.Vocab)
	if err != nil {
		return err
	}
	raw, err := t.JSON()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644)
}

// ParamCount is the number of stored parameters (a tied head counts once).
func (c Config) ParamCount() int {
	w := &Weights[float32]{Cfg: c}
	n := 0
	for _, sp := range w.specs() {
		k := 1
		for _, d := range sp.shape {
			k *= d
		}
		n += k
	}
	return n
}
