// Package golden holds the PyTorch golden files (testdata/, written by
// gen_golden.py: make golden) and what reads them. Its test holds the CPU
// engine to them; kernels/cuda's holds the device engine to the same.
package golden

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// Presets are the models the golden files cover, one per family.
var Presets = []string{"tiny", "tiny-qwen2", "tiny-qwen3", "tiny-llama3"}

// Datum is one sequence of a golden file with its loss inputs.
type Datum struct {
	ModelInput   []int     `json:"model_input"`
	TargetTokens []int     `json:"target_tokens"`
	Weights      []float64 `json:"weights"`
	Advantages   []float64 `json:"advantages"`
	Logprobs     []float64 `json:"logprobs"`
}

// File is what PyTorch computed on one preset (generated with seed 1,
// saved as DType) with the adapter in testdata/PRESET-adapter. A 16-bit
// file (PRESET-bf16.json, PRESET-f16.json) has no AdamW steps.
type File struct {
	Preset      string    `json:"preset"`
	DType       string    `json:"dtype"`
	ModelSHA256 string    `json:"model_sha256"`
	Data        []Datum   `json:"data"`
	Logits0     []float64 `json:"logits0"` // the first datum's logits [T, V]
	Losses      map[string]struct {
		LossSum  float64              `json:"loss_sum"`
		Logprobs [][]float64          `json:"logprobs"`
		Grads    map[string][]float64 `json:"grads"`
	} `json:"losses"`
	AdamW struct {
		Params    map[string]float64   `json:"params"`
		Steps     int                  `json:"steps"`
		GradNorms []float64            `json:"grad_norms"`
		Adapter   map[string][]float64 `json:"adapter"`
	} `json:"adamw"`
}

// Read reads preset's golden file from the folder testdata (this
// package's testdata, from wherever the test runs).
func Read(testdata, preset string) (*File, error) {
	raw, err := os.ReadFile(filepath.Join(testdata, preset+".json"))
	if err != nil {
		return nil, err
	}
	var g File
	if err := json.Unmarshal(raw, &g); err != nil {
		return nil, fmt.Errorf("golden %s: %w", preset, err)
	}
	return &g, nil
}

// Within fails t unless got is within atol + rtol·|want| of PyTorch's want.
func Within(t testing.TB, what string, got, want, atol, rtol float64) {
	t.Helper()
	if math.Abs(got-want) > atol+rtol*math.Abs(want) || math.IsNaN(got) {
		t.Fatalf("%s: got %.8g, PyTorch %.8g", what, got, want)
	}
}
