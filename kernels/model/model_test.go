package model

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wts-project/wts/kernels/safetensors"
)

func TestGenerateLoadRoundTrip(t *testing.T) {
	for _, preset := range []string{"tiny", "tiny-qwen2", "tiny-qwen3", "tiny-llama3"} {
		for _, dt := range []safetensors.DType{safetensors.F32, safetensors.BF16, safetensors.F16} {
			dir := filepath.Join(t.TempDir(), preset)
			if err := Generate(preset, 7, dir, dt); err != nil {
				t.Fatal(err)
			}
			w, err := Load(dir)
			if err != nil {
				t.Fatalf("%s %s: %v", preset, dt, err)
			}
			want, _ := Random(Presets[preset], 7)
			if w.Cfg.ModelType != want.Cfg.ModelType || w.Cfg.QKNorm != want.Cfg.QKNorm || w.Cfg.TieEmbed != want.Cfg.TieEmbed ||
				w.Cfg.QKVBias != want.Cfg.QKVBias || (w.Cfg.RopeScaling == nil) != (want.Cfg.RopeScaling == nil) {
				t.Fatalf("%s: config did not round-trip: %+v vs %+v", preset, w.Cfg, want.Cfg)
			}
			tol := map[safetensors.DType]float32{safetensors.F32: 0, safetensors.BF16: 1.0 / 128, safetensors.F16: 1.0 / 1024}[dt]
			got, exp := w.specs(), want.specs()
			for i := range got {
				g, e := *got[i].dst, *exp[i].dst
				for j := range g {
					if d := g[j] - e[j]; d > tol*abs(e[j])+1e-7 || -d > tol*abs(e[j])+1e-7 {
						t.Fatalf("%s %s %s[%d]: %v vs %v", preset, dt, got[i].name, j, g[j], e[j])
					}
				}
			}
			if w.Cfg.TieEmbed && &w.LMHead[0] != &w.Embed[0] {
				t.Fatal("tied head is not the embedding")
			}
		}
	}
}

func abs(f float32) float32 {
	if f < 0 {
		return -f
	}
	return f
}

func TestGenerateDeterministic(t *testing.T) {
	a, _ := Random(Presets["tiny"], 1)
	b, _ := Random(Presets["tiny"], 1)
	c, _ := Random(Presets["tiny"], 2)
	if a.Layers[1].Wd[5] != b.Layers[1].Wd[5] || a.Layers[1].Wd[5] == c.Layers[1].Wd[5] {
		t.Fatal("seed does not determine weights")
	}
}

func TestSmallPresetSize(t *testing.T) {
	n := Presets["small"].ParamCount()
	if n < 20e6 || n > 30e6 {
		t.Fatalf("small preset has %d parameters, want ~25M", n)
	}
	if n := Presets["qwen3-0.6b"].ParamCount(); n < 590e6 || n > 610e6 {
		t.Fatalf("qwen3-0.6b shape has %d parameters", n)
	}
	if n := Presets["llama-3.2-1b"].ParamCount(); n < 1.2e9 || n > 1.25e9 {
		t.Fatalf("llama-3.2-1b shape has %d parameters", n)
	}
}

func TestShardedLoad(t *testing.T) {
	dir := t.TempDir()
	w, _ := Random(Presets["tiny-qwen2"], 3)
	// Split by hand into two shards with an index, as save_pretrained does.
	var all []safetensors.Tensor
	for _, sp := range w.specs() {
		all = append(all, safetensors.Tensor{Name: sp.name, DType: safetensors.BF16, Shape: sp.shape, Data: *sp.dst})
	}
	half := len(all) / 2
	safetensors.Write(filepath.Join(dir, "model-00001-of-00002.safetensors"), all[:half], nil)
	safetensors.Write(filepath.Join(dir, "model-00002-of-00002.safetensors"), all[half:], nil)
	var sb strings.Builder
	sb.WriteString(`{"metadata":{},"weight_map":{`)
	for i, tn := range all {
		shard := "model-00001-of-00002.safetensors"
		if i >= half {
			shard = "model-00002-of-00002.safetensors"
		}
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(`"` + tn.Name + `":"` + shard + `"`)
	}
	sb.WriteString("}}")
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(sb.String()), 0o644)
	cfg, _ := w.Cfg.HFJSON()
	os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Layers) != 2 || got.Layers[1].Bv == nil {
		t.Fatal("sharded load lost tensors")
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); !errors.Is(err, ErrBadModel) {
		t.Fatalf("empty folder: %v", err)
	}
	Generate("tiny", 1, dir, safetensors.F32)
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(strings.Replace(string(cfg), `"intermediate_size": 64`, `"intermediate_size": 65`, 1)), 0o644)
	if _, err := Load(dir); !errors.Is(err, ErrBadModel) {
		t.Fatalf("shape mismatch: %v", err)
	}
	for _, bad := range []string{`{"model_type":"gpt2"}`, `{"model_type":"llama","hidden_act":"gelu"}`, `not json`,
		`{"model_type":"llama","vocab_size":8,"hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":3,"num_key_value_heads":2,"max_position_embeddings":8}`} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Fatalf("config %s accepted", bad)
		}
	}
}

// A config.json as transformers writes it for Qwen3 must parse to the right
// switches (q/k norm, no bias, explicit head_dim).
func TestParseHFQwen3(t *testing.T) {
	js := `{"architectures":["Qwen3ForCausalLM"],"attention_bias":false,"attention_dropout":0.0,"bos_token_id":151643,
	"eos_token_id":151645,"head_dim":128,"hidden_act":"silu","hidden_size":1024,"initializer_range":0.02,
	"intermediate_size":3072,"max_position_embeddings":40960,"max_window_layers":28,"model_type":"qwen3",
	"num_attention_heads":16,"num_hidden_layers":28,"num_key_value_heads":8,"rms_norm_eps":1e-06,"rope_scaling":null,
	"rope_theta":1000000,"sliding_window":null,"tie_word_embeddings":true,"torch_dtype":"bfloat16",
	"transformers_version":"4.51.0","use_cache":true,"use_sliding_window":false,"vocab_size":151936}`
	c, err := ParseConfig([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	want := Presets["qwen3-0.6b"]
	if c != want {
		t.Fatalf("parsed %+v\nwant   %+v", c, want)
	}
}

// ParseConfig takes files from outside: it must never panic, and whatever it
// accepts must be a consistent configuration.
func FuzzParseConfig(f *testing.F) {
	for _, name := range PresetNames() {
		js, _ := Presets[name].HFJSON()
		f.Add(js)
	}
	f.Add([]byte(`{"model_type":"llama","vocab_size":8,"hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,
		"num_attention_heads":4611686018427387904,"head_dim":4,"max_position_embeddings":8}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted an invalid config: %v", err)
		}
		if c.QDim() <= 0 || c.KVDim() <= 0 || c.ParamCount() <= 0 {
			t.Fatalf("accepted config has non-positive sizes: %+v", c)
		}
	})
}

// Values counts every value a loaded model holds.
func TestConfigValues(t *testing.T) {
	for _, preset := range []string{"tiny", "tiny-qwen2", "tiny-qwen3"} {
		dir := t.TempDir()
		if err := Generate(preset, 1, dir, safetensors.F32); err != nil {
			t.Fatal(err)
		}
		w, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, s := range w.specs() {
			if s.name != "lm_head.weight" || !w.Cfg.TieEmbed {
				n += int64(len(*s.dst))
			}
		}
		if got := w.Cfg.Values(); got != n {
			t.Errorf("%s: Values %d, loaded %d", preset, got, n)
		}
	}
}
