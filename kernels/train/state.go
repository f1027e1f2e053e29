package train

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/optim"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/kernels/transformer"
)

// A saved trainer state is a folder: the adapter as a PEFT adapter (so a
// checkpoint is also a usable adapter) plus optimizer.safetensors with
// AdamW's moments, named after the adapter tensors, and the step count and
// LoRA seed in its metadata. Accumulated gradients are not saved, as in
// PyTorch checkpoints: a state is taken between optimiser steps.
const (
	optimizerFile = "optimizer.safetensors"
	stateFormat   = "wts-trainer-v1"
)

// SaveState writes the trainer's state to dir.
func (t *Trainer) SaveState(dir, baseModel string) error {
	if err := lora.SavePEFT(dir, t.adapter, baseModel); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	var ts []safetensors.Tensor
	for i, p := range t.adapter.Params() {
		shape := []int{p.Rows, p.Cols}
		ts = append(ts,
			safetensors.Tensor{Name: p.Name + ".exp_avg", DType: safetensors.F32, Shape: shape, Data: t.opt.M[i]},
			safetensors.Tensor{Name: p.Name + ".exp_avg_sq", DType: safetensors.F32, Shape: shape, Data: t.opt.V[i]})
	}
	meta := map[string]string{"format": stateFormat, "step": strconv.Itoa(t.opt.Step),
		"lora_seed": strconv.FormatUint(t.adapter.Cfg.Seed, 10)}
	if err := safetensors.Write(filepath.Join(dir, optimizerFile), ts, meta); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}

// LoadState restores a trainer saved by SaveState onto model m.
func LoadState(dir string, m *transformer.Model[float32]) (*Trainer, error) {
	ad, err := lora.LoadPEFT(dir, m.Cfg())
	if err != nil {
		return nil, fmt.Errorf("load state: %w", err)
	}
	f, err := safetensors.Open(filepath.Join(dir, optimizerFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", kerr.ErrBadState, err)
	}
	defer f.Close()
	if f.Metadata["format"] != stateFormat {
		return nil, fmt.Errorf("%w: format %q, want %q", kerr.ErrBadState, f.Metadata["format"], stateFormat)
	}
	step, err := strconv.Atoi(f.Metadata["step"])
	if err != nil || step < 0 {
		return nil, fmt.Errorf("%w: step %q", kerr.ErrBadState, f.Metadata["step"])
	}
	if s, err := strconv.ParseUint(f.Metadata["lora_seed"], 10, 64); err == nil {
		ad.Cfg.Seed = s
	}
	t := NewTrainer(m, ad)
	t.opt = &optim.State{Step: step}
	for _, p := range ad.Params() {
		mo, _, err1 := f.Float32(p.Name + ".exp_avg")
		ve, _, err2 := f.Float32(p.Name + ".exp_avg_sq")
		if err1 != nil || err2 != nil || len(mo) != len(p.Data) || len(ve) != len(p.Data) {
			return nil, fmt.Errorf("%w: optimizer moments for %s missing or misshapen", kerr.ErrBadState, p.Name)
		}
		t.opt.M, t.opt.V = append(t.opt.M, mo), append(t.opt.V, ve)
	}
	return t, nil
}
