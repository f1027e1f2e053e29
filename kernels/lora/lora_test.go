package lora

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wts-project/wts/kernels/model"
)

func cfg(attn, mlp, head bool) Config {
	c := Config{Rank: 4, Alpha: 8, Seed: 11}
	c.Targets(attn, mlp, head)
	return c
}

func TestInitLikePEFT(t *testing.T) {
	mc := model.Presets["tiny"]
	a, err := New(mc, cfg(true, true, true))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range a.Params() {
		bound := 1 / math.Sqrt(float64(p.Cols))
		var nonzero int
		for _, v := range p.Data {
			if p.IsA && math.Abs(float64(v)) > bound {
				t.Fatalf("%s value %v outside ±%v", p.Name, v, bound)
			}
			if !p.IsA && v != 0 {
				t.Fatalf("%s must start at zero", p.Name)
			}
			if v != 0 {
				nonzero++
			}
		}
		if p.IsA && nonzero < len(p.Data)*9/10 {
			t.Fatalf("%s is mostly zero", p.Name)
		}
	}
	if len(a.Params()) != 2*(7*mc.Layers+1) {
		t.Fatalf("%d params", len(a.Params()))
	}
	if a.Scale() != 2 {
		t.Fatalf("scale %v", a.Scale())
	}
	b, _ := New(mc, cfg(true, true, true))
	c := cfg(true, true, true)
	c.Seed = 12
	d, _ := New(mc, c)
	pa, pb, pd := a.Params()[0].Data, b.Params()[0].Data, d.Params()[0].Data
	if pa[3] != pb[3] || pa[3] == pd[3] {
		t.Fatal("seed does not determine the adapter")
	}
}

func TestTargets(t *testing.T) {
	mc := model.Presets["tiny"]
	a, _ := New(mc, cfg(false, true, false))
	if a.Layers[0][Q] != nil || a.Layers[0][Down] == nil || a.LMHead != nil {
		t.Fatal("train_mlp only must target gate/up/down only")
	}
	if got := strings.Join(a.Cfg.TargetNames(), ","); got != "gate_proj,up_proj,down_proj" {
		t.Fatal(got)
	}
	if _, err := New(mc, Config{Rank: 4, Alpha: 1}); err == nil {
		t.Fatal("adapter with no targets accepted")
	}
	if _, err := New(mc, Config{Rank: 0, Alpha: 1, LMHead: true}); err == nil {
		t.Fatal("rank 0 accepted")
	}
}

func TestPEFTRoundTrip(t *testing.T) {
	mc := model.Presets["tiny-qwen3"]
	a, _ := New(mc, cfg(true, false, true))
	for _, p := range a.Params() { // make B non-zero so the check means something
		for i := range p.Data {
			p.Data[i] += float32(i%7) * 0.01
		}
	}
	dir := t.TempDir()
	if err := SavePEFT(dir, a, "tiny-qwen3"); err != nil {
		t.Fatal(err)
	}
	b, err := LoadPEFT(dir, mc)
	if err != nil {
		t.Fatal(err)
	}
	if b.Cfg.Rank != 4 || b.Cfg.Alpha != 8 || !b.Cfg.LMHead || b.Cfg.Modules[Gate] {
		t.Fatalf("config %+v", b.Cfg)
	}
	pa, pb := a.Params(), b.Params()
	for i := range pa {
		for j := range pa[i].Data {
			if pa[i].Data[j] != pb[i].Data[j] {
				t.Fatalf("%s differs", pa[i].Name)
			}
		}
	}
	// Wrong base model: shapes do not fit.
	if _, err := LoadPEFT(dir, model.Presets["small"]); !errors.Is(err, ErrBadAdapter) {
		t.Fatalf("loading onto another model: %v", err)
	}
}

// An adapter_config.json as PEFT writes it, with a q/v-only target list.
func TestLoadPEFTWrittenConfig(t *testing.T) {
	mc := model.Presets["tiny"]
	c := Config{Rank: 2, Alpha: 16}
	c.Modules[Q], c.Modules[V] = true, true
	a := shell[float32](mc, c)
	dir := t.TempDir()
	if err := SavePEFT(dir, a, "x"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"alpha_pattern": {}, "auto_mapping": null,
	 "base_model_name_or_path": "x", "bias": "none", "fan_in_fan_out": false, "inference_mode": true,
	 "init_lora_weights": true, "layer_replication": null, "layers_pattern": null, "layers_to_transform": null,
	 "loftq_config": {}, "lora_alpha": 16, "lora_dropout": 0.05, "megatron_config": null, "megatron_core": "megatron.core",
	 "modules_to_save": null, "peft_type": "LORA", "r": 2, "rank_pattern": {}, "revision": null,
	 "target_modules": ["v_proj", "q_proj"], "task_type": "CAUSAL_LM", "use_dora": false, "use_rslora": false}`), 0o644)
	b, err := LoadPEFT(dir, mc)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Cfg.Modules[Q] || !b.Cfg.Modules[V] || b.Cfg.Modules[K] || b.Scale() != 8 {
		t.Fatalf("%+v", b.Cfg)
	}
	os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"peft_type":"LORA","r":2,"lora_alpha":16,"target_modules":["q_proj"],"use_dora":true}`), 0o644)
	if _, err := LoadPEFT(dir, mc); !errors.Is(err, ErrBadAdapter) {
		t.Fatalf("DoRA accepted: %v", err)
	}
}

// LoadPEFT reads adapter_config.json from outside: it must never panic on
// one, and accept only configurations it can honour.
func FuzzLoadPEFTConfig(f *testing.F) {
	mc := model.Presets["tiny"]
	dir := f.TempDir()
	a, _ := New(mc, cfg(true, true, true))
	if err := SavePEFT(dir, a, "tiny"); err != nil {
		f.Fatal(err)
	}
	good, _ := os.ReadFile(filepath.Join(dir, ConfigFile))
	f.Add(good)
	f.Add([]byte(`{"peft_type":"LORA","r":4,"lora_alpha":8,"target_modules":"q_proj,v_proj"}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), js, 0o644); err != nil {
			t.Skip()
		}
		b, err := LoadPEFT(dir, mc)
		if err != nil {
			return
		}
		if b.Cfg.Validate() != nil || b.Cfg.Rank != 4 {
			t.Fatalf("accepted %s as %+v", js, b.Cfg)
		}
	})
}

// Values counts exactly the values an adapter holds.
func TestValuesCountsParams(t *testing.T) {
	mc := model.Presets["tiny"]
	for _, targets := range [][3]bool{{true, false, false}, {false, true, false}, {true, true, true}} {
		cfg := Config{Rank: 3, Alpha: 8}
		cfg.Targets(targets[0], targets[1], targets[2])
		a, err := New(mc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, p := range a.Params() {
			n += int64(len(p.Data))
		}
		if got := cfg.Values(mc); got != n {
			t.Errorf("%v: Values %d, the adapter holds %d", targets, got, n)
		}
	}
}
