// Package transformer runs a Llama-family decoder with LoRA adapters: the
// training forward and backward passes over packed sequences, the chunked LM
// head, and KV-cache decoding for sampling. The base weights are read-only
// here, so one Model serves any number of adapters at once.
package transformer

import (
	"fmt"
	"unsafe"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/ops"
)

// Model is a frozen base model ready to run.
type Model[F gemm.Float] struct {
	W    *model.Weights[F]
	rope *ops.Rope[F]
	proj [][lora.NumModules]weight[F] // per layer, indexed by LoRA module
	head weight[F]
	// embed16 holds the embeddings [V, D] in half's type when the model
	// keeps its base in 16 bits (W.Embed and W.LMHead are then dropped);
	// nil otherwise.
	embed16 []uint16
	half    gemm.Half
}

// New prepares weights for running. For float32 every projection and the
// LM head is packed twice (see gemm.Packed): as Wᵀ for the forward product
// and as W for the input gradient, which otherwise packed every weight again
// in every backward pass. The projections' row-major copies are then
// dropped from w, since nothing reads them after, so the weights' memory
// about doubles; the head keeps its own, which tied models share with the
// embeddings.
func New[F gemm.Float](w *model.Weights[F]) *Model[F] { return NewWith(w, Options{}) }

// Options choose how New keeps the base weights.
type Options struct {
	// Half, when set, keeps every base projection, the LM head and the
	// embeddings in that 16-bit type (bf16 or f16, rounded to nearest
	// even), half the bytes, which float32 products and the token lookup
	// widen as they read them (gemm.Slab.PackTHalf); float32 models only.
	Half gemm.Half
}

// NewWith is New with options.
func NewWith[F gemm.Float](w *model.Weights[F], o Options) *Model[F] {
	m, err := build(w, o, inMemory[F]{})
	if err != nil {
		panic(err) // inMemory reads nothing, so it cannot fail
	}
	return m
}

// Load builds a float32 model from an open folder, reading each matrix as
// it packs it: a base kept in 16 bits reads them as that type
// (model.Folder.ReadNarrow) and never holds a float32 copy of its weights;
// a float32 one holds each projection only until it is packed.
func Load(f *model.Folder, o Options) (*Model[float32], error) { return build(f.W, o, folder{f}) }

// source gives build the base's matrices, w's slices: in memory already, or
// read from a folder as they are packed.
type source[F gemm.Float] interface {
	// read fills *dst.
	read(dst *[]F) error
	// narrow returns *dst's values in type t (float32 models only).
	narrow(dst *[]F, t gemm.Half) ([]uint16, error)
}

type inMemory[F gemm.Float] struct{}

func (inMemory[F]) read(*[]F) error { return nil }

func (inMemory[F]) narrow(dst *[]F, t gemm.Half) ([]uint16, error) {
	return t.Narrow(any(*dst).([]float32)), nil
}

type folder struct{ f *model.Folder }

func (s folder) read(dst *[]float32) error { return s.f.Read(dst) }

func (s folder) narrow(dst *[]float32, t gemm.Half) ([]uint16, error) {
	return s.f.ReadNarrow(dst, t.DType())
}

func build[F gemm.Float](w *model.Weights[F], o Options, src source[F]) (*Model[F], error) {
	m := &Model[F]{W: w, rope: ops.NewRope[F](ops.InvFreq(w.Cfg)), proj: make([][lora.NumModules]weight[F], len(w.Layers))}
	c := w.Cfg
	_, f32 := any(F(0)).(float32)
	half := o.Half
	if !f32 {
		half = 0
	}
	m.half = half
	slab := frozenSlab[F](c, half != 0)
	// frozen packs the matrix at W [out, in] and drops it from w, where
	// nothing reads it after (float64 models pack nothing and keep it).
	frozen := func(W *[]F, out, in int) (weight[F], error) {
		if half != 0 {
			h, err := src.narrow(W, half)
			if err != nil {
				return weight[F]{}, err
			}
			*W = nil
			return halfWeight[F](slab, half, h, out, in), nil
		}
		if err := src.read(W); err != nil {
			return weight[F]{}, err
		}
		pw := newFrozenWeight(slab, *W, out, in)
		if pw.packed != nil {
			pw.W, *W = nil, nil
		}
		return pw, nil
	}
	for l := range w.Layers {
		L := &w.Layers[l]
		mats := [lora.NumModules]*[]F{lora.Q: &L.Wq, lora.K: &L.Wk, lora.V: &L.Wv, lora.O: &L.Wo,
			lora.Gate: &L.Wg, lora.Up: &L.Wu, lora.Down: &L.Wd}
		for mod, W := range mats {
			out, in := lora.Module(mod).Dims(c)
			pw, err := frozen(W, out, in)
			if err != nil {
				return nil, err
			}
			m.proj[l][mod] = pw
		}
	}
	if half != 0 {
		// The embeddings stay in 16 bits too, and so does the head, packed
		// from them when tied.
		e, err := src.narrow(&w.Embed, half)
		if err != nil {
			return nil, err
		}
		m.embed16 = e
		if c.TieEmbed {
			m.head = halfWeight[F](slab, half, e, c.Vocab, c.Hidden)
		} else if m.head, err = frozen(&w.LMHead, c.Vocab, c.Hidden); err != nil {
			return nil, err
		}
		w.Embed, w.LMHead = nil, nil
		return m, nil
	}
	// The head keeps its float32 matrix: tied models share it with the
	// embeddings.
	if err := src.read(&w.Embed); err != nil {
		return nil, err
	}
	if c.TieEmbed {
		w.LMHead = w.Embed
	} else if err := src.read(&w.LMHead); err != nil {
		return nil, err
	}
	m.head = newFrozenWeight(slab, w.LMHead, c.Vocab, c.Hidden)
	return m, nil
}

// embed writes the embeddings of tokens into x [len(tokens), D].
func (m *Model[F]) embed(x []F, tokens []int) {
	D := m.W.Cfg.Hidden
	for t, tok := range tokens {
		row := x[t*D : (t+1)*D]
		if m.embed16 == nil {
			copy(row, m.W.Embed[tok*D:(tok+1)*D])
			continue
		}
		for i, h := range m.embed16[tok*D : (tok+1)*D] {
			row[i] = F(m.half.Widen(h))
		}
	}
}

// frozenSlab returns room for every packed copy of a float32 model's base
// weights (Wᵀ and W of each projection and of the LM head), nil for float64,
// which packs nothing.
func frozenSlab[F gemm.Float](c model.Config, half bool) *gemm.Slab {
	if _, ok := any(F(0)).(float32); !ok {
		return nil
	}
	both := func(out, in int) int { // Wᵀ and W
		if half {
			return (gemm.PackedLen(out, in)+1)/2 + (gemm.PackedLen(in, out)+1)/2
		}
		return gemm.PackedLen(out, in) + gemm.PackedLen(in, out)
	}
	floats := both(c.Vocab, c.Hidden)
	for mod := range lora.Module(lora.NumModules) {
		floats += c.Layers * both(mod.Dims(c))
	}
	return gemm.NewSlab(floats)
}

// WeightBytes is the memory the base weights take: the packed copies of
// each projection and of the LM head, and the embeddings.
func (m *Model[F]) WeightBytes() int64 {
	var n int64
	add := func(w weight[F]) {
		for _, p := range []*gemm.Packed{w.packed, w.grad} {
			if p != nil {
				n += p.Bytes()
			}
		}
		if w.packed == nil {
			n += int64(len(w.W)) * int64(unsafe.Sizeof(F(0)))
		}
	}
	for _, l := range m.proj {
		for _, w := range l {
			add(w)
		}
	}
	add(m.head)
	return n + int64(len(m.W.Embed))*int64(unsafe.Sizeof(F(0))) + 2*int64(len(m.embed16))
}

// Cfg is the model's configuration.
func (m *Model[F]) Cfg() model.Config { return m.W.Cfg }

// Batch is sequences packed end to end: sequence i is
// Tokens[Starts[i]:Starts[i+1]]. Packing lets every projection run as one
// large matrix product; only attention and RoPE look at the boundaries.
type Batch struct {
	Tokens []int
	Starts []int // len = sequences+1, Starts[0] = 0, last = len(Tokens)
}

// Pack builds a Batch from separate sequences.
func Pack(seqs [][]int) Batch {
	b := Batch{Starts: make([]int, 0, len(seqs)+1)}
	for _, s := range seqs {
		b.Starts = append(b.Starts, len(b.Tokens))
		b.Tokens = append(b.Tokens, s...)
	}
	b.Starts = append(b.Starts, len(b.Tokens))
	return b
}

// layerAct is what one layer keeps for its backward pass.
type layerAct[F gemm.Float] struct {
	x, h1, inv1            []F                  // layer input [T, D], its norm, 1/rms [T]
	qPre, kPre, qInv, kInv []F                  // Qwen3 q/k before head norm, and its 1/rms
	q, k, v                []F                  // after bias, head norm and RoPE: [T, Q], [T, KV]
	attn, lse              []F                  // attention output [T, Q]; per sequence [Hq, L] log-sum-exp
	x2, h2, inv2           []F                  // after the attention residual, its norm, 1/rms
	g, u, a                []F                  // gate and up projections, silu(g)⊙u: [T, I]
	lu                     [lora.NumModules][]F // x·Aᵀ per LoRA module: [T, r]
}

// Activations is a forward pass's saved state.
type Activations[F gemm.Float] struct {
	B      Batch
	ar     *Arena[F]     // where this pass's buffers come from
	groups []rowGroup[F] // the rows' adapters and gradients
	layers []layerAct[F]
	rope   *ops.RopeTable[F]
	xf     []F // final residual stream [T, D]
	invf   []F
	Hidden []F // final normed hidden states [T, D], the LM head's input
	// backward: the pass keeps what Backward needs beyond the forward's own
	// inputs (attention's log-sum-exp); false for Infer.
	backward bool
}

// T is the number of packed tokens.
func (a *Activations[F]) T() int { return len(a.B.Tokens) }

func positions(b Batch) []int {
	pos := make([]int, len(b.Tokens))
	for i := 0; i+1 < len(b.Starts); i++ {
		for t := b.Starts[i]; t < b.Starts[i+1]; t++ {
			pos[t] = t - b.Starts[i]
		}
	}
	return pos
}

// Group gives Seqs consecutive sequences of a batch, from where the
// previous group's end, an adapter (nil: the base model) and, for
// Backward, the adapter gradient they add into (nil: none). Several runs'
// training passes over one base model share a pass this way: every base
// product runs once for all their rows and each adapter's LoRA terms on
// its own rows, and each group's results are the ones a pass of its own
// gives, bit for bit.
type Group[F gemm.Float] struct {
	Adapter, Grads *lora.Adapter[F]
	Seqs           int
}

// Forward runs the decoder trunk over a batch with adapter ad (nil for the
// bare base model), keeping what a backward pass needs: ForwardGroups with
// one group. Buffers come from ar (nil allocates); they stay valid until
// ar is reset.
func (m *Model[F]) Forward(ad *lora.Adapter[F], b Batch, ar *Arena[F]) (*Activations[F], error) {
	return m.ForwardGroups([]Group[F]{{Adapter: ad, Seqs: len(b.Starts) - 1}}, b, ar, true)
}

// Infer is Forward for a pass that no Backward follows (forward, logprobs):
// attention keeps no log-sum-exp, a log per query row and head.
func (m *Model[F]) Infer(ad *lora.Adapter[F], b Batch, ar *Arena[F]) (*Activations[F], error) {
	return m.ForwardGroups([]Group[F]{{Adapter: ad, Seqs: len(b.Starts) - 1}}, b, ar, false)
}

// ForwardGroups is Forward (backward true) or Infer over a batch whose
// sequences gs give their adapters, in order; their Seqs add up to the
// batch's sequences.
func (m *Model[F]) ForwardGroups(gs []Group[F], b Batch, ar *Arena[F], backward bool) (*Activations[F], error) {
	c := m.W.Cfg
	T, D := len(b.Tokens), c.Hidden
	for _, tok := range b.Tokens {
		if tok < 0 || tok >= c.Vocab {
			return nil, fmt.Errorf("%w: token id %d, vocabulary [0, %d)", kerr.ErrTokenRange, tok, c.Vocab)
		}
	}
	for i := 0; i+1 < len(b.Starts); i++ {
		if L := b.Starts[i+1] - b.Starts[i]; L > c.MaxPos {
			return nil, fmt.Errorf("%w: %d tokens, context %d", kerr.ErrTooLong, L, c.MaxPos)
		}
	}
	rows, err := m.rowGroups(gs, b)
	if err != nil {
		return nil, err
	}
	act := ar.activations(c.Layers)
	act.B, act.ar, act.groups, act.rope, act.backward = b, ar, rows, m.rope.Table(positions(b)), backward
	x := ar.Take(T * D)
	m.embed(x, b.Tokens)
	for l := range act.layers {
		x = m.layerForward(l, &act.layers[l], act, x)
	}
	act.xf = x
	act.invf = ar.Take(T)
	act.Hidden = ar.Take(T * D)
	ops.RMSNorm(act.Hidden, act.invf, x, m.W.Norm, T, D, c.RMSEps)
	return act, nil
}

// rowGroups turns groups of sequences into groups of b's packed rows.
func (m *Model[F]) rowGroups(gs []Group[F], b Batch) ([]rowGroup[F], error) {
	rows := make([]rowGroup[F], 0, len(gs))
	seq := 0
	for _, g := range gs {
		if g.Seqs < 0 || seq+g.Seqs >= len(b.Starts) {
			return nil, fmt.Errorf("transformer: groups of %d sequences or more for a batch of %d", seq+g.Seqs, len(b.Starts)-1)
		}
		rows = append(rows, rowGroup[F]{ts: liveTerms(m, g.Adapter), grads: g.Grads, lo: b.Starts[seq], hi: b.Starts[seq+g.Seqs]})
		seq += g.Seqs
	}
	if seq != len(b.Starts)-1 {
		return nil, fmt.Errorf("transformer: groups of %d sequences for a batch of %d", seq, len(b.Starts)-1)
	}
	return rows, nil
}

// project runs one projection of layer l over every group's rows, taking
// the LoRA scratch it keeps for the backward pass.
func (m *Model[F]) project(l int, mod lora.Module, la *layerAct[F], act *Activations[F], y, x []F, in, out int, b []F) {
	T, r := act.T(), maxRank(act.groups)
	la.lu[mod] = nil
	for _, g := range act.groups {
		if g.ts.term(l, mod).a.W != nil {
			la.lu[mod] = act.ar.Take(T * r)
			break
		}
	}
	linear(y, x, T, in, out, m.proj[l][mod], b, act.groups, 0, func(g rowGroup[F]) term[F] { return g.ts.term(l, mod) }, la.lu[mod])
}

func (m *Model[F]) layerForward(l int, la *layerAct[F], act *Activations[F], x []F) []F {
	c, w := m.W.Cfg, &m.W.Layers[l]
	T, D, Q, KV, I := len(act.B.Tokens), c.Hidden, c.QDim(), c.KVDim(), c.Intermediate
	ar := act.ar
	la.x = x
	la.h1, la.inv1 = ar.Take(T*D), ar.Take(T)
	ops.RMSNorm(la.h1, la.inv1, x, w.AttnNorm, T, D, c.RMSEps)

	la.q, la.k, la.v = ar.Take(T*Q), ar.Take(T*KV), ar.Take(T*KV)
	m.project(l, lora.Q, la, act, la.q, la.h1, D, Q, w.Bq)
	m.project(l, lora.K, la, act, la.k, la.h1, D, KV, w.Bk)
	m.project(l, lora.V, la, act, la.v, la.h1, D, KV, w.Bv)
	if c.QKNorm {
		la.qPre, la.qInv = ar.Take(T*Q), ar.Take(T*c.Heads)
		la.kPre, la.kInv = ar.Take(T*KV), ar.Take(T*c.KVHeads)
		ops.HeadNorm(la.q, la.qPre, la.qInv, w.QNorm, T, c.Heads, c.HeadDim, c.RMSEps)
		ops.HeadNorm(la.k, la.kPre, la.kInv, w.KNorm, T, c.KVHeads, c.HeadDim, c.RMSEps)
	}
	act.rope.Rope(la.q, T, c.Heads)
	act.rope.Rope(la.k, T, c.KVHeads)

	la.attn = ar.Take(T * Q)
	if act.backward {
		la.lse = ar.Take(T * c.Heads)
	}
	for i := 0; i+1 < len(act.B.Starts); i++ {
		o, L := act.B.Starts[i], act.B.Starts[i+1]-act.B.Starts[i]
		var lse []F
		if la.lse != nil {
			lse = la.lse[o*c.Heads:]
		}
		ops.Attention(la.attn[o*Q:], lse, la.q[o*Q:], la.k[o*KV:], la.v[o*KV:], L, L, c.Heads, c.KVHeads, c.HeadDim, ops.KVLayout{Row: KV, Head: c.HeadDim})
	}

	la.x2 = ar.Take(T * D)
	m.project(l, lora.O, la, act, la.x2, la.attn, Q, D, w.Bo)
	ops.Add(la.x2, x)
	la.h2, la.inv2 = ar.Take(T*D), ar.Take(T)
	ops.RMSNorm(la.h2, la.inv2, la.x2, w.MLPNorm, T, D, c.RMSEps)
	la.g, la.u, la.a = ar.Take(T*I), ar.Take(T*I), ar.Take(T*I)
	m.project(l, lora.Gate, la, act, la.g, la.h2, D, I, nil)
	m.project(l, lora.Up, la, act, la.u, la.h2, D, I, nil)
	ops.SwiGLU(la.a, la.g, la.u)
	out := ar.Take(T * D)
	m.project(l, lora.Down, la, act, out, la.a, I, D, nil)
	ops.Add(out, la.x2)
	return out
}

// Backward adds dL/d(LoRA parameters) into each group's gradient, given
// dL/dHidden.
func (m *Model[F]) Backward(act *Activations[F], dHidden []F) {
	if !act.backward {
		panic("transformer: Backward of an Infer pass")
	}
	c := m.W.Cfg
	T, D := act.T(), c.Hidden
	dx := act.ar.Alloc(T * D)
	ops.RMSNormBackward(dx, dHidden, act.xf, m.W.Norm, act.invf, T, D)
	for l := c.Layers - 1; l >= 0; l-- {
		dx = m.layerBackward(l, &act.layers[l], act, dx, l > 0)
	}
}

// projBackward is linearBackward for one projection of layer l.
func (m *Model[F]) projBackward(l int, mod lora.Module, la *layerAct[F], act *Activations[F], dx []F, beta F, dy, x []F, in, out int) {
	linearBackward(dx, beta, dy, x, act.T(), in, out, m.proj[l][mod], act.groups, 0, func(g rowGroup[F]) (term[F], *lora.Pair[F]) {
		if g.grads == nil {
			return g.ts.term(l, mod), nil
		}
		return g.ts.term(l, mod), g.grads.Layers[l][mod]
	}, la.lu[mod], act.ar)
}

// layerBackward takes dL/d(layer output) and returns dL/d(layer input); the
// input gradient of the first layer is not needed (embeddings are frozen),
// so needDx false skips it.
func (m *Model[F]) layerBackward(l int, la *layerAct[F], act *Activations[F], dout []F, needDx bool) []F {
	c, w := m.W.Cfg, &m.W.Layers[l]
	T, D, Q, KV, I := act.T(), c.Hidden, c.QDim(), c.KVDim(), c.Intermediate
	ar := act.ar

	// out = x2 + down(silu(g)⊙u)
	dx2 := ar.Clone(dout)
	da := ar.Take(T * I)
	m.projBackward(l, lora.Down, la, act, da, 0, dout, la.a, I, D)
	dg, du := ar.Take(T*I), ar.Take(T*I)
	ops.SwiGLUBackward(dg, du, da, la.g, la.u)
	dh2 := ar.Take(T * D)
	m.projBackward(l, lora.Gate, la, act, dh2, 0, dg, la.h2, D, I)
	m.projBackward(l, lora.Up, la, act, dh2, 1, du, la.h2, D, I)
	ops.RMSNormBackward(dx2, dh2, la.x2, w.MLPNorm, la.inv2, T, D)

	// x2 = x + o_proj(attn)
	dattn := ar.Take(T * Q)
	m.projBackward(l, lora.O, la, act, dattn, 0, dx2, la.attn, Q, D)
	dq, dk, dv := ar.Take(T*Q), ar.Take(T*KV), ar.Take(T*KV)
	for i := 0; i+1 < len(act.B.Starts); i++ {
		o, L := act.B.Starts[i], act.B.Starts[i+1]-act.B.Starts[i]
		ops.AttentionBackward(dq[o*Q:], dk[o*KV:], dv[o*KV:], dattn[o*Q:], la.q[o*Q:], la.k[o*KV:], la.v[o*KV:],
			la.attn[o*Q:], la.lse[o*c.Heads:], L, L, c.Heads, c.KVHeads, c.HeadDim)
	}
	act.rope.RopeBackward(dq, T, c.Heads)
	act.rope.RopeBackward(dk, T, c.KVHeads)
	if c.QKNorm {
		dqPre, dkPre := ar.Alloc(T*Q), ar.Alloc(T*KV)
		ops.RMSNormBackward(dqPre, dq, la.qPre, w.QNorm, la.qInv, T*c.Heads, c.HeadDim)
		ops.RMSNormBackward(dkPre, dk, la.kPre, w.KNorm, la.kInv, T*c.KVHeads, c.HeadDim)
		dq, dk = dqPre, dkPre
	}
	var dh1 []F // only needed to go on to the layer below
	if needDx {
		dh1 = ar.Take(T * D)
	}
	m.projBackward(l, lora.Q, la, act, dh1, 0, dq, la.h1, D, Q)
	m.projBackward(l, lora.K, la, act, dh1, 1, dk, la.h1, D, KV)
	m.projBackward(l, lora.V, la, act, dh1, 1, dv, la.h1, D, KV)
	if !needDx {
		return nil
	}
	ops.RMSNormBackward(dx2, dh1, la.x, w.AttnNorm, la.inv1, T, D)
	return dx2
}
