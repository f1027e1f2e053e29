package transformer

import (
	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/lora"
)

// Frozen is an adapter prepared for inference (a sampler's snapshot at one
// weight version): every pair packed once, A as Aᵀ and B as Bᵀ, like the base
// weights. Decoding then runs its LoRA terms through the packed kernels;
// read in place every step instead, the thin u·Bᵀ product (depth r) cost a
// quarter of the base projection it rides on. A nil *Frozen is the base
// model alone. The adapter must not change while frozen.
type Frozen[F gemm.Float] struct {
	Adapter *lora.Adapter[F]
	layers  [][lora.NumModules]term[F]
	head    term[F]
}

// Freeze prepares ad (nil for the base model) for Extend, Decode and Logits.
func (m *Model[F]) Freeze(ad *lora.Adapter[F]) *Frozen[F] {
	if ad == nil {
		return nil
	}
	c := m.W.Cfg
	z := &Frozen[F]{Adapter: ad, layers: make([][lora.NumModules]term[F], c.Layers)}
	pack := func(p *lora.Pair[F], in, out int) term[F] {
		if p == nil {
			return term[F]{}
		}
		r := ad.Cfg.Rank
		return term[F]{a: newWeight(nil, p.A, r, in), b: newWeight(nil, p.B, out, r), s: ad.Scale()}
	}
	for l := range z.layers {
		for mod := range lora.Module(lora.NumModules) {
			out, in := mod.Dims(c)
			z.layers[l][mod] = pack(ad.Layers[l][mod], in, out)
		}
	}
	z.head = pack(ad.LMHead, c.Hidden, c.Vocab)
	return z
}

// term returns module mod of layer l, the zero term for the base model.
func (z *Frozen[F]) term(l int, mod lora.Module) term[F] {
	if z == nil {
		return term[F]{}
	}
	return z.layers[l][mod]
}

// lmHead returns the LM head's term, the zero term for the base model.
func (z *Frozen[F]) lmHead() term[F] {
	if z == nil {
		return term[F]{}
	}
	return z.head
}

// rank is the adapter's rank, 0 for the base model.
func (z *Frozen[F]) rank() int {
	if z == nil {
		return 0
	}
	return z.Adapter.Cfg.Rank
}
