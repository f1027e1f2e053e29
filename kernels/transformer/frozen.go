package transformer

import (
	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/lora"
)

// terms is an adapter's LoRA pairs as the products see them, by layer and
// module, and the LM head's: packed once for inference (Frozen), or read in
// place for training, whose pairs change every step (liveTerms). A nil
// *terms is the base model alone.
type terms[F gemm.Float] struct {
	adapter *lora.Adapter[F]
	layers  [][lora.NumModules]term[F]
	head    term[F]
}

// newTerms wraps every pair of ad with wrap (in, out: the module's shape).
func newTerms[F gemm.Float](m *Model[F], ad *lora.Adapter[F], wrap func(p *lora.Pair[F], in, out int) term[F]) *terms[F] {
	c := m.W.Cfg
	ts := &terms[F]{adapter: ad, layers: make([][lora.NumModules]term[F], c.Layers)}
	for l := range ts.layers {
		for mod := range lora.Module(lora.NumModules) {
			out, in := mod.Dims(c)
			if p := ad.Layers[l][mod]; p != nil {
				ts.layers[l][mod] = wrap(p, in, out)
			}
		}
	}
	if ad.LMHead != nil {
		ts.head = wrap(ad.LMHead, c.Hidden, c.Vocab)
	}
	return ts
}

// liveTerms is ad (nil: the base model) as a training pass reads it.
func liveTerms[F gemm.Float](m *Model[F], ad *lora.Adapter[F]) *terms[F] {
	if ad == nil {
		return nil
	}
	return newTerms(m, ad, func(p *lora.Pair[F], _, _ int) term[F] { return termOf(ad, p) })
}

// term returns module mod of layer l, the zero term for the base model.
func (ts *terms[F]) term(l int, mod lora.Module) term[F] {
	if ts == nil {
		return term[F]{}
	}
	return ts.layers[l][mod]
}

// lmHead returns the LM head's term, the zero term for the base model.
func (ts *terms[F]) lmHead() term[F] {
	if ts == nil {
		return term[F]{}
	}
	return ts.head
}

// rank is the adapter's rank, 0 for the base model.
func (ts *terms[F]) rank() int {
	if ts == nil {
		return 0
	}
	return ts.adapter.Cfg.Rank
}

// Frozen is an adapter prepared for inference (a sampler's snapshot at one
// weight version): every pair packed once, A as Aᵀ and B as Bᵀ, like the base
// weights. Decoding then runs its LoRA terms through the packed kernels;
// read in place every step instead, the thin u·Bᵀ product (depth r) cost a
// quarter of the base projection it rides on. A nil *Frozen is the base
// model alone. The adapter must not change while frozen.
type Frozen[F gemm.Float] struct {
	Adapter *lora.Adapter[F]
	terms   *terms[F]
}

// Freeze prepares ad (nil for the base model) for Extend, Decode and Logits.
func (m *Model[F]) Freeze(ad *lora.Adapter[F]) *Frozen[F] {
	if ad == nil {
		return nil
	}
	r := ad.Cfg.Rank
	return &Frozen[F]{Adapter: ad, terms: newTerms(m, ad, func(p *lora.Pair[F], in, out int) term[F] {
		return term[F]{a: newWeight(nil, p.A, r, in), b: newWeight(nil, p.B, out, r), s: ad.Scale()}
	})}
}

// Source is the adapter z was frozen from (sampler.Adapter).
func (z *Frozen[F]) Source() *lora.Adapter[F] { return z.Adapter }

// view is z's terms, nil for the base model.
func (z *Frozen[F]) view() *terms[F] {
	if z == nil {
		return nil
	}
	return z.terms
}
