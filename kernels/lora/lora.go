// Package lora holds LoRA adapters over a frozen base model: their
// configuration, PEFT-compatible initialisation, and the PEFT file format.
//
// A target module W [out, in] gains the low-rank update scale·B·A with
// A [r, in] and B [out, r], so y = x·Wᵀ + scale·(x·Aᵀ)·Bᵀ.
package lora

import (
	"fmt"
	"math"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/rng"
)

// Module indexes the per-layer projections LoRA can target.
type Module int

// The per-layer target modules, in PEFT's names.
const (
	Q Module = iota
	K
	V
	O
	Gate
	Up
	Down
	NumModules
)

var moduleNames = [NumModules]string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

func (m Module) String() string { return moduleNames[m] }

func (m Module) isAttn() bool { return m <= O }

// Dims gives a module's weight shape [out, in].
func (m Module) Dims(c model.Config) (out, in int) {
	switch m {
	case Q:
		return c.QDim(), c.Hidden
	case K, V:
		return c.KVDim(), c.Hidden
	case O:
		return c.Hidden, c.QDim()
	case Gate, Up:
		return c.Intermediate, c.Hidden
	default:
		return c.Hidden, c.Intermediate
	}
}

// Config chooses the adapter's rank, scaling, seed and targets.
type Config struct {
	Rank    int
	Alpha   float64 // scaling is Alpha/Rank (Alpha/√Rank with RSLoRA)
	RSLoRA  bool
	Seed    uint64
	Modules [NumModules]bool // per-layer targets
	LMHead  bool
}

// Targets sets the modules from the service's switches: train_attn targets
// q, k, v and o; train_mlp gate, up and down; train_unembed lm_head.
func (c *Config) Targets(attn, mlp, unembed bool) {
	for m := Module(0); m < NumModules; m++ {
		c.Modules[m] = (m.isAttn() && attn) || (!m.isAttn() && mlp)
	}
	c.LMHead = unembed
}

// DefaultAlpha is used when a caller gives none. It is a common choice in
// LoRA fine-tuning recipes and is recorded in every saved adapter.
const DefaultAlpha = 32

// MaxRank bounds the rank: beyond it LoRA stops being low-rank for the
// models we serve and memory per adapter grows past a sane budget.
const MaxRank = 256

// Validate checks the configuration on its own.
func (c Config) Validate() error {
	if c.Rank < 1 || c.Rank > MaxRank {
		return fmt.Errorf("lora rank %d is outside 1..%d", c.Rank, MaxRank)
	}
	if !(c.Alpha > 0) || math.IsInf(c.Alpha, 0) {
		return fmt.Errorf("lora alpha %v must be positive", c.Alpha)
	}
	if len(c.TargetNames()) == 0 {
		return fmt.Errorf("lora: no target modules (set at least one of train_attn, train_mlp, train_unembed)")
	}
	return nil
}

// Values is the number of values an adapter of this configuration has
// over a model of configuration mc: rank × (in + out) for each targeted
// module of each layer, and for lm_head. Memory budgets are sized from it
// before anything is allocated.
func (c Config) Values(mc model.Config) int64 {
	var n int64
	for m := Module(0); m < NumModules; m++ {
		if c.Modules[m] {
			out, in := m.Dims(mc)
			n += int64(mc.Layers) * int64(c.Rank) * int64(in+out)
		}
	}
	if c.LMHead {
		n += int64(c.Rank) * int64(mc.Vocab+mc.Hidden)
	}
	return n
}

// Pair is one target's factors.
type Pair[F gemm.Float] struct {
	A       []F // [Rank, In]
	B       []F // [Out, Rank]
	In, Out int
}

// Adapter is a set of LoRA pairs over one base model. The same type carries
// gradients (see ZerosLike), so optimisers walk both with one list.
type Adapter[F gemm.Float] struct {
	Cfg    Config
	Model  model.Config
	Layers [][NumModules]*Pair[F] // nil where a module is not targeted
	LMHead *Pair[F]
}

// Scale is the factor on the low-rank update.
func (a *Adapter[F]) Scale() F {
	if a.Cfg.RSLoRA {
		return F(a.Cfg.Alpha / math.Sqrt(float64(a.Cfg.Rank)))
	}
	return F(a.Cfg.Alpha / float64(a.Cfg.Rank))
}

// TargetNames lists the targeted modules in PEFT's target_modules spelling.
func (c Config) TargetNames() []string {
	var t []string
	for m := Module(0); m < NumModules; m++ {
		if c.Modules[m] {
			t = append(t, m.String())
		}
	}
	if c.LMHead {
		t = append(t, "lm_head")
	}
	return t
}

// New creates an adapter initialised as PEFT does: A Kaiming-uniform
// (bound 1/√in, which is kaiming_uniform_ with a=√5), B zero, so the adapted
// model starts equal to the base. Each A draws from its own stream keyed by
// (seed, PEFT tensor name): the same seed gives the same adapter anywhere.
func New(mc model.Config, cfg Config) (*Adapter[float32], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := shell[float32](mc, cfg)
	for _, p := range a.Params() {
		if !p.IsA {
			continue
		}
		r := rng.Derive(cfg.Seed, rng.HashString(p.Name))
		bound := 1 / math.Sqrt(float64(p.Cols))
		for i := range p.Data {
			p.Data[i] = float32(r.Uniform(-bound, bound))
		}
	}
	return a, nil
}

// shell allocates zeroed pairs for every targeted module.
func shell[F gemm.Float](mc model.Config, cfg Config) *Adapter[F] {
	a := &Adapter[F]{Cfg: cfg, Model: mc, Layers: make([][NumModules]*Pair[F], mc.Layers)}
	newPair := func(out, in int) *Pair[F] {
		return &Pair[F]{A: make([]F, cfg.Rank*in), B: make([]F, out*cfg.Rank), In: in, Out: out}
	}
	for l := range a.Layers {
		for m := Module(0); m < NumModules; m++ {
			if cfg.Modules[m] {
				a.Layers[l][m] = newPair(m.Dims(mc))
			}
		}
	}
	if cfg.LMHead {
		a.LMHead = newPair(mc.Vocab, mc.Hidden)
	}
	return a
}

// ZerosLike returns an adapter of the same shape with all values zero: the
// gradient accumulator and the optimiser moments use it.
func (a *Adapter[F]) ZerosLike() *Adapter[F] { return shell[F](a.Model, a.Cfg) }

// Param is one tensor of an adapter with its PEFT name and shape.
type Param[F gemm.Float] struct {
	Name       string
	Data       []F
	Rows, Cols int
	IsA        bool
}

// Params lists every tensor in a fixed order (layer, module, A then B; then
// lm_head). Two adapters of the same shape list matching tensors at matching
// indices, which is what the optimiser and the state format rely on.
func (a *Adapter[F]) Params() []Param[F] {
	var ps []Param[F]
	add := func(prefix string, p *Pair[F]) {
		r := a.Cfg.Rank
		ps = append(ps,
			Param[F]{Name: prefix + ".lora_A.weight", Data: p.A, Rows: r, Cols: p.In, IsA: true},
			Param[F]{Name: prefix + ".lora_B.weight", Data: p.B, Rows: p.Out, Cols: r})
	}
	for l, mods := range a.Layers {
		for m, p := range mods {
			if p == nil {
				continue
			}
			part := "mlp"
			if Module(m).isAttn() {
				part = "self_attn"
			}
			add(fmt.Sprintf("base_model.model.model.layers.%d.%s.%s", l, part, Module(m)), p)
		}
	}
	if a.LMHead != nil {
		add("base_model.model.lm_head", a.LMHead)
	}
	return ps
}

// Clone deep-copies the adapter (a sampler snapshot at a weight version).
func (a *Adapter[F]) Clone() *Adapter[F] {
	c := a.ZerosLike()
	src, dst := a.Params(), c.Params()
	for i := range src {
		copy(dst[i].Data, src[i].Data)
	}
	return c
}

// Float64 converts the adapter for the float64 reference path.
func (a *Adapter[F]) Float64() *Adapter[float64] {
	c := shell[float64](a.Model, a.Cfg)
	src, dst := a.Params(), c.Params()
	for i := range src {
		for j, v := range src[i].Data {
			dst[i].Data[j] = float64(v)
		}
	}
	return c
}
