package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/wts-project/wts/kernels/gguf"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/providers"
)

func modelCmd(args []string) error {
	return sub("model", args, []command{
		{"init", "--preset NAME --seed S --out DIR [--dtype F32|BF16|F16]", "generate a model folder (HF layout) with deterministic weights", modelInit},
		{"info", "DIR", "a model folder's shape, parameters and revision", modelInfo},
		{"export", "--format gguf [--dtype F32|F16|BF16] --out FILE DIR", "write a model folder as a GGUF file for llama.cpp (the benchmarks' peer)", modelExport},
	})
}

func modelInit(args []string) error {
	fs := flag.NewFlagSet("model init", flag.ContinueOnError)
	preset := fs.String("preset", "small", "model shape: "+strings.Join(model.PresetNames(), ", "))
	seed := fs.Uint64("seed", 0, "weight seed (same seed, same weights, on any machine)")
	out := fs.String("out", "", "output folder (HF layout)")
	dtype := fs.String("dtype", "F32", "stored element type: F32, BF16 or F16")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("model init: --out is required")
	}
	dt := safetensors.DType(strings.ToUpper(*dtype))
	if dt.Size() == 0 {
		return fmt.Errorf("model init: unknown dtype %q", *dtype)
	}
	if err := model.Generate(*preset, *seed, *out, dt); err != nil {
		return fmt.Errorf("model init: %w", err)
	}
	fmt.Printf("wrote %s (%s, seed %d, %d parameters) to %s\n", *preset, dt, *seed, model.Presets[strings.ToLower(*preset)].ParamCount(), *out)
	return nil
}

func modelInfo(args []string) error {
	fs := flag.NewFlagSet("model info", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintln(fs.Output(), "usage: wts model info DIR") }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("usage: wts model info DIR")
	}
	dir := fs.Arg(0)
	data, err := os.ReadFile(dir + "/config.json")
	if err != nil {
		return err
	}
	c, err := model.ParseConfig(data)
	if err != nil {
		return err
	}
	rev, err := providers.Revision(dir)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d layers, hidden %d, heads %d/%d x %d, mlp %d, vocab %d, context %d, %d parameters; revision %s\n",
		c.ModelType, c.Layers, c.Hidden, c.Heads, c.KVHeads, c.HeadDim, c.Intermediate, c.Vocab, c.MaxPos, c.ParamCount(), rev)
	return nil
}

func modelExport(args []string) error {
	fs := flag.NewFlagSet("model export", flag.ContinueOnError)
	format := fs.String("format", "gguf", "the file format: gguf")
	dtype := fs.String("dtype", "F32", "the matrices' element type: F32, F16 or BF16 (norms stay F32)")
	out := fs.String("out", "", "the file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *out == "" || *format != "gguf" {
		return fmt.Errorf("model export: want --format gguf --out FILE DIR")
	}
	types := map[string]uint32{"F32": gguf.F32, "F16": gguf.F16, "BF16": gguf.BF16}
	dt, ok := types[strings.ToUpper(*dtype)]
	if !ok {
		return fmt.Errorf("model export: --dtype %q: F32, F16 or BF16", *dtype)
	}
	if err := gguf.Export(fs.Arg(0), dt, *out); err != nil {
		return fmt.Errorf("model export: %w", err)
	}
	fmt.Printf("wrote %s\n", *out)
	return nil
}
