package lora

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
)

// PEFT's file names inside an adapter folder.
const (
	ConfigFile  = "adapter_config.json"
	WeightsFile = "adapter_model.safetensors"
)

// peftConfig is the subset of PEFT's LoraConfig we write and read.
type peftConfig struct {
	PeftType          string          `json:"peft_type"`
	TaskType          string          `json:"task_type"`
	BaseModel         string          `json:"base_model_name_or_path"`
	Revision          *string         `json:"revision"`
	R                 int             `json:"r"`
	LoraAlpha         float64         `json:"lora_alpha"`
	LoraDropout       float64         `json:"lora_dropout"`
	TargetModules     json.RawMessage `json:"target_modules"`
	Bias              string          `json:"bias"`
	FanInFanOut       bool            `json:"fan_in_fan_out"`
	UseRSLoRA         bool            `json:"use_rslora"`
	UseDoRA           bool            `json:"use_dora"`
	InitLoraWeights   bool            `json:"init_lora_weights"`
	InferenceMode     bool            `json:"inference_mode"`
	ModulesToSave     []string        `json:"modules_to_save"`
	LayersToTransform json.RawMessage `json:"layers_to_transform"`
	RankPattern       map[string]any  `json:"rank_pattern"`
	AlphaPattern      map[string]any  `json:"alpha_pattern"`
}

// ErrBadAdapter marks a PEFT folder we cannot load: a variant we do not
// implement (DoRA, per-module ranks, bias training) or tensors that do not
// fit the base model.
var ErrBadAdapter = kerr.ErrBadAdapter

// SavePEFT writes the adapter as PEFT does: adapter_config.json and
// adapter_model.safetensors with PEFT tensor names, in float32.
func SavePEFT[F float32 | float64](dir string, a *Adapter[F], baseModel string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	targets, _ := json.Marshal(a.Cfg.TargetNames())
	cfg := peftConfig{
		PeftType: "LORA", TaskType: "CAUSAL_LM", BaseModel: baseModel, R: a.Cfg.Rank, LoraAlpha: a.Cfg.Alpha,
		TargetModules: targets, Bias: "none", UseRSLoRA: a.Cfg.RSLoRA, InitLoraWeights: true, InferenceMode: true,
	}
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), js, 0o644); err != nil {
		return err
	}
	var ts []safetensors.Tensor
	for _, p := range a.Params() {
		data := make([]float32, len(p.Data))
		for i, v := range p.Data {
			data[i] = float32(v)
		}
		ts = append(ts, safetensors.Tensor{Name: p.Name, DType: safetensors.F32, Shape: []int{p.Rows, p.Cols}, Data: data})
	}
	return safetensors.Write(filepath.Join(dir, WeightsFile), ts, map[string]string{"format": "pt"})
}

// LoadPEFT reads a PEFT LoRA adapter for a base model with config mc.
func LoadPEFT(dir string, mc model.Config) (*Adapter[float32], error) {
	js, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadAdapter, err)
	}
	var pc peftConfig
	if err := json.Unmarshal(js, &pc); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadAdapter, ConfigFile, err)
	}
	switch {
	case pc.PeftType != "LORA":
		return nil, fmt.Errorf("%w: peft_type %q is not LORA", ErrBadAdapter, pc.PeftType)
	case pc.UseDoRA:
		return nil, fmt.Errorf("%w: DoRA adapters are not supported", ErrBadAdapter)
	case pc.Bias != "" && pc.Bias != "none":
		return nil, fmt.Errorf("%w: bias %q is not supported", ErrBadAdapter, pc.Bias)
	case pc.FanInFanOut:
		return nil, fmt.Errorf("%w: fan_in_fan_out adapters are not supported", ErrBadAdapter)
	case len(pc.ModulesToSave) > 0:
		return nil, fmt.Errorf("%w: modules_to_save is not supported", ErrBadAdapter)
	case len(pc.RankPattern) > 0 || len(pc.AlphaPattern) > 0:
		return nil, fmt.Errorf("%w: per-module rank or alpha patterns are not supported", ErrBadAdapter)
	case len(pc.LayersToTransform) > 0 && string(pc.LayersToTransform) != "null":
		return nil, fmt.Errorf("%w: layers_to_transform is not supported", ErrBadAdapter)
	}
	cfg := Config{Rank: pc.R, Alpha: pc.LoraAlpha, RSLoRA: pc.UseRSLoRA}
	var names []string
	if err := json.Unmarshal(pc.TargetModules, &names); err != nil {
		var one string
		if json.Unmarshal(pc.TargetModules, &one) != nil {
			return nil, fmt.Errorf("%w: target_modules must be a list of names", ErrBadAdapter)
		}
		names = strings.Split(one, ",") // a regex in PEFT; only plain names are understood
	}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "all-linear" {
			cfg.Targets(true, true, false)
			continue
		}
		found := n == "lm_head"
		cfg.LMHead = cfg.LMHead || found
		for m := Module(0); m < NumModules; m++ {
			if m.String() == n {
				cfg.Modules[m], found = true, true
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: target module %q is not a Llama-family projection", ErrBadAdapter, n)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadAdapter, err)
	}
	f, err := safetensors.Open(filepath.Join(dir, WeightsFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadAdapter, err)
	}
	defer f.Close()
	// PEFT saves without the adapter name; older files may keep ".default".
	byName := map[string]string{}
	for n := range f.Tensors {
		byName[strings.Replace(n, ".default.weight", ".weight", 1)] = n
	}
	a := shell[float32](mc, cfg)
	for _, p := range a.Params() {
		src, ok := byName[p.Name]
		if !ok {
			return nil, fmt.Errorf("%w: tensor %s is missing", ErrBadAdapter, p.Name)
		}
		data, shape, err := f.Float32(src)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadAdapter, err)
		}
		if len(shape) != 2 || shape[0] != p.Rows || shape[1] != p.Cols {
			return nil, fmt.Errorf("%w: %s has shape %v, want [%d %d]", ErrBadAdapter, p.Name, shape, p.Rows, p.Cols)
		}
		copy(p.Data, data)
		delete(byName, p.Name)
	}
	if len(byName) > 0 {
		for n := range byName {
			return nil, fmt.Errorf("%w: unexpected tensor %s", ErrBadAdapter, n)
		}
	}
	return a, nil
}
