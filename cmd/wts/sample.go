package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/tokenizer"
	"github.com/wts-project/wts/kernels/transformer"
	"github.com/wts-project/wts/providers"
)

// sampleCmd samples from a model folder (and optionally a PEFT adapter) on
// this machine and prints the result as JSON: the engine without the service.
func sampleCmd(args []string) error {
	fs := flag.NewFlagSet("sample", flag.ContinueOnError)
	dir := fs.String("model", "", "HF model folder")
	adapterDir := fs.String("adapter", "", "PEFT adapter folder (optional)")
	prompt := fs.String("prompt", "1", "comma-separated prompt token ids")
	text := fs.String("text", "", "a text prompt, through the model folder's tokenizer.json (in place of --prompt); the samples are printed as text too")
	n := fs.Int("n", 1, "number of samples")
	var p sampler.Params
	fs.IntVar(&p.MaxTokens, "max-tokens", 16, "tokens to generate")
	fs.Float64Var(&p.Temperature, "temperature", 1, "0 is greedy")
	fs.Float64Var(&p.TopP, "top-p", 1, "nucleus mass")
	fs.IntVar(&p.TopK, "top-k", -1, "-1 disables")
	fs.Float64Var(&p.MinP, "min-p", 0, "relative to the top token")
	seed := fs.Int64("seed", -1, "-1 for a random seed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("sample: --model is required")
	}
	if *seed >= 0 {
		s := uint64(*seed)
		p.Seed = &s
	}
	var toks []int
	var tok *tokenizer.Tokenizer
	if *text != "" {
		var err error
		if tok, err = tokenizer.Load(filepath.Join(*dir, providers.TokenizerFile)); err != nil {
			return fmt.Errorf("sample: --text: %w", err)
		}
		if toks, err = tok.Encode(*text); err != nil {
			return err
		}
	} else {
		for _, f := range strings.Split(*prompt, ",") {
			t, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("sample: prompt: %w", err)
			}
			toks = append(toks, t)
		}
	}
	w, err := model.Load(*dir)
	if err != nil {
		return err
	}
	var ad *lora.Adapter[float32]
	if *adapterDir != "" {
		if ad, err = lora.LoadPEFT(*adapterDir, w.Cfg); err != nil {
			return err
		}
	}
	m := transformer.New(w)
	res, err := sampler.Sample(sampler.OnCPU(m), m.Freeze(ad), sampler.Request{Prompt: toks, Params: p, NumSamples: *n})
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if tok == nil {
		return enc.Encode(res)
	}
	texts := make([]string, len(res.Sequences))
	for i, s := range res.Sequences {
		if texts[i], err = tok.Decode(s.Tokens, true); err != nil {
			return err
		}
	}
	return enc.Encode(map[string]any{"prompt": *text, "prompt_tokens": toks, "texts": texts, "result": res})
}
