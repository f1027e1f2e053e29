package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/safetensors"
)

// Layer is one decoder block's frozen weights, in HF layout ([out, in]).
type Layer[F gemm.Float] struct {
	AttnNorm []F // [D]
	Wq       []F // [Hq*hd, D]
	Wk, Wv   []F // [Hkv*hd, D]
	Wo       []F // [D, Hq*hd]
	Bq       []F // [Hq*hd] or nil
	Bk, Bv   []F // [Hkv*hd] or nil
	Bo       []F // [D] or nil
	QNorm    []F // [hd] or nil (Qwen3)
	KNorm    []F // [hd] or nil (Qwen3)
	MLPNorm  []F // [D]
	Wg, Wu   []F // [I, D]
	Wd       []F // [D, I]
}

// Weights is a whole frozen base model. It is never written after loading, so
// any number of adapters and samplers may read it at once.
type Weights[F gemm.Float] struct {
	Cfg    Config
	Embed  []F // [V, D]
	Layers []Layer[F]
	Norm   []F // [D]
	LMHead []F // [V, D]; the same slice as Embed when tied
}

// tensorSpec names one HF tensor, its shape, and where it lives in Weights.
type tensorSpec[F gemm.Float] struct {
	name  string
	shape []int
	dst   *[]F
	init  initKind
}

type initKind int

const (
	initLinear initKind = iota
	initNorm
	initBias
)

// specs lists every tensor the config calls for, in HF names. Loading and
// generating both walk this one list, so they cannot disagree on a name.
func (w *Weights[F]) specs() []tensorSpec[F] {
	c := w.Cfg
	D, Q, KV, I, hd := c.Hidden, c.QDim(), c.KVDim(), c.Intermediate, c.HeadDim
	s := []tensorSpec[F]{{"model.embed_tokens.weight", []int{c.Vocab, D}, &w.Embed, initLinear}}
	if len(w.Layers) != c.Layers {
		w.Layers = make([]Layer[F], c.Layers)
	}
	for i := range w.Layers {
		l := &w.Layers[i]
		p := fmt.Sprintf("model.layers.%d.", i)
		s = append(s,
			tensorSpec[F]{p + "input_layernorm.weight", []int{D}, &l.AttnNorm, initNorm},
			tensorSpec[F]{p + "self_attn.q_proj.weight", []int{Q, D}, &l.Wq, initLinear},
			tensorSpec[F]{p + "self_attn.k_proj.weight", []int{KV, D}, &l.Wk, initLinear},
			tensorSpec[F]{p + "self_attn.v_proj.weight", []int{KV, D}, &l.Wv, initLinear},
			tensorSpec[F]{p + "self_attn.o_proj.weight", []int{D, Q}, &l.Wo, initLinear},
			tensorSpec[F]{p + "post_attention_layernorm.weight", []int{D}, &l.MLPNorm, initNorm},
			tensorSpec[F]{p + "mlp.gate_proj.weight", []int{I, D}, &l.Wg, initLinear},
			tensorSpec[F]{p + "mlp.up_proj.weight", []int{I, D}, &l.Wu, initLinear},
			tensorSpec[F]{p + "mlp.down_proj.weight", []int{D, I}, &l.Wd, initLinear},
		)
		if c.QKVBias {
			s = append(s,
				tensorSpec[F]{p + "self_attn.q_proj.bias", []int{Q}, &l.Bq, initBias},
				tensorSpec[F]{p + "self_attn.k_proj.bias", []int{KV}, &l.Bk, initBias},
				tensorSpec[F]{p + "self_attn.v_proj.bias", []int{KV}, &l.Bv, initBias})
		}
		if c.OBias {
			s = append(s, tensorSpec[F]{p + "self_attn.o_proj.bias", []int{D}, &l.Bo, initBias})
		}
		if c.QKNorm {
			s = append(s,
				tensorSpec[F]{p + "self_attn.q_norm.weight", []int{hd}, &l.QNorm, initNorm},
				tensorSpec[F]{p + "self_attn.k_norm.weight", []int{hd}, &l.KNorm, initNorm})
		}
	}
	s = append(s, tensorSpec[F]{"model.norm.weight", []int{D}, &w.Norm, initNorm})
	if !c.TieEmbed {
		s = append(s, tensorSpec[F]{"lm_head.weight", []int{c.Vocab, D}, &w.LMHead, initLinear})
	}
	return s
}

// ErrBadModel marks a model folder that is missing files or tensors, or whose
// tensors do not have the shapes its config implies.
var ErrBadModel = kerr.ErrBadModel

// Load reads an HF model folder: config.json plus model.safetensors, or shards
// listed by model.safetensors.index.json.
func Load(dir string) (*Weights[float32], error) {
	f, err := Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	for _, sp := range f.W.specs() {
		if sp.init == initLinear {
			if err := f.Read(sp.dst); err != nil {
				return nil, err
			}
		}
	}
	if f.W.Cfg.TieEmbed {
		f.W.LMHead = f.W.Embed
	}
	return f.W, nil
}

// Folder is an open model folder. Open checks every tensor the config
// calls for and reads the small ones (norms, biases); the matrices
// (projections, embeddings, head) stay on disk until Read or ReadNarrow asks
// for one, so a loader can pack each as it comes and never hold a float32
// copy of the whole model.
type Folder struct {
	// W holds the config and the small tensors; its matrices are nil until
	// read.
	W     *Weights[float32]
	dir   string
	files []*safetensors.File
	at    map[*[]float32]tensorAt
}

// tensorAt is where one of W's slices lives on disk.
type tensorAt struct {
	name string
	file *safetensors.File
}

// Open opens the model folder dir (see Load).
func Open(dir string) (*Folder, error) {
	cfgBytes, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadModel, err)
	}
	cfg, err := ParseConfig(cfgBytes)
	if err != nil {
		return nil, err
	}
	files, err := openShards(dir)
	if err != nil {
		return nil, err
	}
	f := &Folder{W: &Weights[float32]{Cfg: cfg}, dir: dir, files: files, at: map[*[]float32]tensorAt{}}
	where := map[string]*safetensors.File{}
	for _, sf := range files {
		for name := range sf.Tensors {
			where[name] = sf
		}
	}
	for _, sp := range f.W.specs() {
		sf, ok := where[sp.name]
		if !ok {
			f.Close()
			return nil, fmt.Errorf("%w: %s: tensor %s is missing", ErrBadModel, dir, sp.name)
		}
		if shape := sf.Tensors[sp.name].Shape; !slices.Equal(shape, sp.shape) {
			f.Close()
			return nil, fmt.Errorf("%w: %s has shape %v, config implies %v", ErrBadModel, sp.name, shape, sp.shape)
		}
		f.at[sp.dst] = tensorAt{sp.name, sf}
		if sp.init != initLinear {
			if err := f.Read(sp.dst); err != nil {
				f.Close()
				return nil, err
			}
		}
	}
	return f, nil
}

// Read fills dst, one of f.W's slices, from disk, widened to float32.
func (f *Folder) Read(dst *[]float32) error {
	t, err := f.tensor(dst)
	if err != nil {
		return err
	}
	data, _, err := t.file.Float32(t.name)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadModel, err)
	}
	*dst = data
	return nil
}

// ReadNarrow reads the tensor that belongs in dst, one of f.W's slices, as
// the 16-bit type d (safetensors.File.Narrow), leaving dst as it is.
func (f *Folder) ReadNarrow(dst *[]float32, d safetensors.DType) ([]uint16, error) {
	t, err := f.tensor(dst)
	if err != nil {
		return nil, err
	}
	data, _, err := t.file.Narrow(t.name, d)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadModel, err)
	}
	return data, nil
}

func (f *Folder) tensor(dst *[]float32) (tensorAt, error) {
	t, ok := f.at[dst]
	if !ok {
		return t, fmt.Errorf("%w: %s: no tensor belongs in that slice", ErrBadModel, f.dir)
	}
	return t, nil
}

// Close closes the folder's files; the tensors read stay.
func (f *Folder) Close() {
	for _, sf := range f.files {
		sf.Close()
	}
}

func openShards(dir string) ([]*safetensors.File, error) {
	var names []string
	if idx, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json")); err == nil {
		var index struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(idx, &index); err != nil {
			return nil, fmt.Errorf("%w: model.safetensors.index.json: %v", ErrBadModel, err)
		}
		seen := map[string]bool{}
		for _, shard := range index.WeightMap {
			if !seen[shard] && filepath.Base(shard) == shard {
				seen[shard] = true
				names = append(names, shard)
			}
		}
		sort.Strings(names)
	} else {
		names = []string{"model.safetensors"}
	}
	var files []*safetensors.File
	for _, n := range names {
		f, err := safetensors.Open(filepath.Join(dir, n))
		if err != nil {
			for _, o := range files {
				o.Close()
			}
			return nil, fmt.Errorf("%w: %v", ErrBadModel, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// Float64 returns a float64 copy, for the finite-difference reference path.
func (w *Weights[F]) Float64() *Weights[float64] {
	out := &Weights[float64]{Cfg: w.Cfg}
	src := w.specs()
	dst := out.specs()
	for i := range src {
		*dst[i].dst = widen(*src[i].dst)
	}
	if w.Cfg.TieEmbed {
		out.LMHead = out.Embed
	}
	return out
}

func widen[F gemm.Float](s []F) []float64 {
	if s == nil {
		return nil
	}
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = float64(v)
	}
	return out
}

// Values is the number of values the weights of configuration c hold (the
// tensors specs lists), so that memory can be planned before loading.
func (c Config) Values() int64 {
	var n int64
	for _, s := range (&Weights[float32]{Cfg: c}).specs() {
		v := int64(1)
		for _, d := range s.shape {
			v *= int64(d)
		}
		n += v
	}
	return n
}

// Rounded is a copy of w with every projection, the LM head and the
// embeddings rounded to the 16-bit type d (nearest even): the values a
// base kept in d computes with, for tests that hold it to a float32 model.
func Rounded(w *Weights[float32], d safetensors.DType) *Weights[float32] {
	r := func(x []float32) []float32 { return safetensors.Decode(d, safetensors.Encode(d, x)) }
	c := *w
	c.Embed, c.LMHead = r(w.Embed), r(w.LMHead)
	if w.Cfg.TieEmbed {
		c.LMHead = c.Embed
	}
	c.Layers = make([]Layer[float32], len(w.Layers))
	for i, l := range w.Layers {
		l.Wq, l.Wk, l.Wv, l.Wo, l.Wg, l.Wu, l.Wd = r(l.Wq), r(l.Wk), r(l.Wv), r(l.Wo), r(l.Wg), r(l.Wu), r(l.Wd)
		c.Layers[i] = l
	}
	return &c
}
