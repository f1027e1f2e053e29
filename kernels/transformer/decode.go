package transformer

import (
	"fmt"
	"math"
	"slices"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/ops"
	"github.com/wts-project/wts/kernels/par"
)

// Cache holds one sequence's keys and values (after RoPE) for every layer.
// A cache may sit on a read-only prefix (a prompt shared by several samples):
// attention then reads the prefix's entries first and its own after them.
type Cache[F gemm.Float] struct {
	k, v   [][]F // per layer: [n, KV]
	n      int
	prefix *Cache[F]
}

// NewCache returns an empty cache for model m.
func (m *Model[F]) NewCache() *Cache[F] {
	return &Cache[F]{k: make([][]F, m.W.Cfg.Layers), v: make([][]F, m.W.Cfg.Layers)}
}

// Fork returns an empty cache that continues after c. c must not grow after
// it has been forked.
func (c *Cache[F]) Fork() *Cache[F] {
	return &Cache[F]{k: make([][]F, len(c.k)), v: make([][]F, len(c.v)), prefix: c}
}

// Reserve makes room in c for rows more positions in every layer, so that
// decoding appends in place: grown by append, a cache is copied over and over
// (by 1.25× steps once large), which cost a tenth of batched decoding of the
// Qwen3 shape.
func (m *Model[F]) Reserve(c *Cache[F], rows int) {
	kv := m.W.Cfg.KVDim()
	for l := range c.k {
		c.k[l] = slices.Grow(c.k[l], rows*kv)
		c.v[l] = slices.Grow(c.v[l], rows*kv)
	}
}

// Len is the number of positions held, prefix included.
func (c *Cache[F]) Len() int {
	if c.prefix != nil {
		return c.prefix.Len() + c.n
	}
	return c.n
}

// prefillChunk bounds the tokens per prefill pass so that the attention
// scores (chunk × context per head) stay small for long prompts.
const prefillChunk = 256

// Extend appends tokens to a cache with no prefix and returns the final
// hidden states [len(tokens), D] of the new positions.
func (m *Model[F]) Extend(z *Frozen[F], c *Cache[F], tokens []int) ([]F, error) {
	cfg := m.W.Cfg
	if c.prefix != nil {
		return nil, fmt.Errorf("extend: cache has a prefix")
	}
	if c.n+len(tokens) > cfg.MaxPos {
		return nil, fmt.Errorf("%w: %d tokens, context %d", kerr.ErrTooLong, c.n+len(tokens), cfg.MaxPos)
	}
	for _, t := range tokens {
		if t < 0 || t >= cfg.Vocab {
			return nil, fmt.Errorf("%w: token id %d, vocabulary [0, %d)", kerr.ErrTokenRange, t, cfg.Vocab)
		}
	}
	D := cfg.Hidden
	hidden := make([]F, len(tokens)*D)
	for lo := 0; lo < len(tokens); lo += prefillChunk {
		hi := min(lo+prefillChunk, len(tokens))
		m.extendChunk(z, c, tokens[lo:hi], hidden[lo*D:hi*D])
	}
	return hidden, nil
}

// ExtendRows prefills several prompts at once, each into its own empty
// cache under its own adapter (zs[i]; nil: the base model): one pass over
// all their tokens, every base product once for all rows, each adapter's
// LoRA terms on its prompt's rows, attention within each prompt. It returns
// each prompt's hidden states [len(prompts[i]), D]. A prompt longer than a
// prefill chunk is extended on its own, in chunks.
func (m *Model[F]) ExtendRows(zs []*Frozen[F], caches []*Cache[F], prompts [][]int) ([][]F, error) {
	cfg := m.W.Cfg
	out := make([][]F, len(prompts))
	var batch []int // prompts prefilled together
	for i, p := range prompts {
		if len(p) > prefillChunk || len(prompts) == 1 {
			h, err := m.Extend(zs[i], caches[i], p)
			if err != nil {
				return nil, err
			}
			out[i] = h
			continue
		}
		if caches[i].prefix != nil || caches[i].n != 0 {
			return nil, fmt.Errorf("extend rows: cache %d is not empty", i)
		}
		for _, t := range p {
			if t < 0 || t >= cfg.Vocab {
				return nil, fmt.Errorf("%w: token id %d, vocabulary [0, %d)", kerr.ErrTokenRange, t, cfg.Vocab)
			}
		}
		batch = append(batch, i)
	}
	if len(batch) == 0 {
		return out, nil
	}
	var tokens, pos []int
	var rowZ []*Frozen[F]
	start := make([]int, len(batch)+1) // batch prompt k has rows [start[k], start[k+1])
	for k, i := range batch {
		tokens = append(tokens, prompts[i]...)
		for j := range prompts[i] {
			pos = append(pos, j)
			rowZ = append(rowZ, zs[i])
		}
		start[k+1] = len(tokens)
	}
	D, Q, KV, H := cfg.Hidden, cfg.QDim(), cfg.KVDim(), cfg.Heads
	s := m.newStep(tokens, pos)
	hidden := make([]F, len(tokens)*D)
	lse := make([]F, prefillChunk*H)
	m.cachedForward(groupRows(rowZ), s, hidden, func(l int) {
		for k, i := range batch {
			lo, hi, c := start[k], start[k+1], caches[i]
			c.k[l] = append(c.k[l], s.k[lo*KV:hi*KV]...)
			c.v[l] = append(c.v[l], s.v[lo*KV:hi*KV]...)
			ops.Attention(s.attn[lo*Q:hi*Q], lse, s.q[lo*Q:hi*Q], c.k[l], c.v[l], hi-lo, hi-lo, H, cfg.KVHeads, cfg.HeadDim)
		}
	})
	for k, i := range batch {
		caches[i].n = start[k+1] - start[k]
		out[i] = hidden[start[k]*D : start[k+1]*D]
	}
	return out, nil
}

// step is the per-pass scratch of a cached forward: one row per new token,
// and the RoPE table for the positions they take.
type step[F gemm.Float] struct {
	x, h, q, k, v, attn, g, u []F
	rope                      *ops.RopeTable[F]
}

func (m *Model[F]) newStep(tokens, pos []int) *step[F] {
	c := m.W.Cfg
	T, D, Q, KV, I := len(tokens), c.Hidden, c.QDim(), c.KVDim(), c.Intermediate
	s := &step[F]{x: make([]F, T*D), h: make([]F, T*D), q: make([]F, T*Q), k: make([]F, T*KV), v: make([]F, T*KV),
		attn: make([]F, T*Q), g: make([]F, T*I), u: make([]F, T*I), rope: ops.NewRopeTable[F](m.invFreq, pos)}
	for t, tok := range tokens {
		copy(s.x[t*D:(t+1)*D], m.W.Embed[tok*D:(tok+1)*D])
	}
	return s
}

// cachedForward runs every layer over the rows of s, with attend filling
// s.attn for layer l once s.k and s.v hold the new keys and values. It leaves
// the final normed hidden states in out.
func (m *Model[F]) cachedForward(gs []rowGroup[F], s *step[F], out []F, attend func(l int)) {
	c := m.W.Cfg
	T, D, Q, KV, I := len(s.x)/c.Hidden, c.Hidden, c.QDim(), c.KVDim(), c.Intermediate
	inv := make([]F, T)
	qInv, kInv := make([]F, T*c.Heads), make([]F, T*c.KVHeads) // Qwen3 head-norm factors
	lu := make([]F, T*maxRank(gs))
	var l int
	mod := func(mod lora.Module) func(*Frozen[F]) term[F] {
		return func(z *Frozen[F]) term[F] { return z.term(l, mod) }
	}
	linear := func(y, x []F, in, out int, w weight[F], b []F, mm lora.Module) {
		linearRows(y, x, T, in, out, w, b, gs, 0, mod(mm), lu)
	}
	for l = 0; l < c.Layers; l++ {
		w, pw := &m.W.Layers[l], &m.proj[l]
		ops.RMSNorm(s.h, inv, s.x, w.AttnNorm, T, D, c.RMSEps)
		linear(s.q, s.h, D, Q, pw[lora.Q], w.Bq, lora.Q)
		linear(s.k, s.h, D, KV, pw[lora.K], w.Bk, lora.K)
		linear(s.v, s.h, D, KV, pw[lora.V], w.Bv, lora.V)
		if c.QKNorm {
			ops.HeadNorm(s.q, s.attn, qInv, w.QNorm, T, c.Heads, c.HeadDim, c.RMSEps)
			ops.HeadNorm(s.k, s.attn, kInv, w.KNorm, T, c.KVHeads, c.HeadDim, c.RMSEps)
		}
		s.rope.Rope(s.q, T, c.Heads)
		s.rope.Rope(s.k, T, c.KVHeads)
		attend(l)
		o := s.h // the normed input is dead now; reuse it for o_proj
		linear(o, s.attn, Q, D, pw[lora.O], w.Bo, lora.O)
		for i := range o {
			s.x[i] += o[i]
		}
		ops.RMSNorm(s.h, inv, s.x, w.MLPNorm, T, D, c.RMSEps)
		linear(s.g, s.h, D, I, pw[lora.Gate], nil, lora.Gate)
		linear(s.u, s.h, D, I, pw[lora.Up], nil, lora.Up)
		ops.SwiGLU(s.g, s.g, s.u)
		linear(s.h, s.g, I, D, pw[lora.Down], nil, lora.Down)
		for i := range s.h {
			s.x[i] += s.h[i]
		}
	}
	ops.RMSNorm(out, inv, s.x, m.W.Norm, T, D, c.RMSEps)
}

func (m *Model[F]) extendChunk(z *Frozen[F], c *Cache[F], tokens []int, out []F) {
	cfg := m.W.Cfg
	T, KV := len(tokens), cfg.KVDim()
	pos := make([]int, T)
	for i := range pos {
		pos[i] = c.n + i
	}
	s := m.newStep(tokens, pos)
	lse := make([]F, T*cfg.Heads)
	m.cachedForward([]rowGroup[F]{{z, 0, T}}, s, out, func(l int) {
		c.k[l] = append(c.k[l], s.k...)
		c.v[l] = append(c.v[l], s.v...)
		S := len(c.k[l]) / KV
		ops.Attention(s.attn, lse, s.q, c.k[l], c.v[l], T, S, cfg.Heads, cfg.KVHeads, cfg.HeadDim)
	})
	c.n += T
}

// Decode appends one token to each cache (one sequence each, all distinct)
// and returns the final hidden states [len(caches), D]: one batched pass, so
// every weight is read once for the whole batch.
func (m *Model[F]) Decode(z *Frozen[F], caches []*Cache[F], tokens []int) ([]F, error) {
	zs := make([]*Frozen[F], len(caches))
	for i := range zs {
		zs[i] = z
	}
	return m.DecodeRows(zs, caches, tokens)
}

// DecodeRows is Decode where row b samples from adapter zs[b] (nil: the
// base model): sequences of several samplers over one base model decode in
// one pass, every base product once for all rows and each adapter's LoRA
// terms on its own (consecutive) rows.
func (m *Model[F]) DecodeRows(zs []*Frozen[F], caches []*Cache[F], tokens []int) ([]F, error) {
	cfg := m.W.Cfg
	B, KV, hd := len(caches), cfg.KVDim(), cfg.HeadDim
	pos := make([]int, B)
	for b, c := range caches {
		pos[b] = c.Len()
		if pos[b]+1 > cfg.MaxPos {
			return nil, fmt.Errorf("%w: %d tokens, context %d", kerr.ErrTooLong, pos[b]+1, cfg.MaxPos)
		}
		if t := tokens[b]; t < 0 || t >= cfg.Vocab {
			return nil, fmt.Errorf("%w: token id %d, vocabulary [0, %d)", kerr.ErrTokenRange, t, cfg.Vocab)
		}
	}
	s := m.newStep(tokens, pos)
	out := make([]F, B*cfg.Hidden)
	m.cachedForward(groupRows(zs), s, out, func(l int) {
		for b, c := range caches {
			c.k[l] = append(c.k[l], s.k[b*KV:(b+1)*KV]...)
			c.v[l] = append(c.v[l], s.v[b*KV:(b+1)*KV]...)
		}
		group := cfg.Heads / cfg.KVHeads
		scale := F(1 / math.Sqrt(float64(hd)))
		work := 2 * cfg.Heads / cfg.KVHeads * caches[0].Len() * hd // a group's q·kᵀ and p·v
		par.For(B*cfg.KVHeads, par.MinChunk(work, 1), func(lo, hi int) {
			var scores []F
			for i := lo; i < hi; i++ {
				b, g := i/cfg.KVHeads, i%cfg.KVHeads
				h := (b*cfg.Heads + g*group) * hd // the group's first query head
				scores = decodeAttention(scores, s.attn[h:h+group*hd], s.q[h:h+group*hd], caches[b], l, g*hd, KV, hd, scale)
			}
		})
	})
	for _, c := range caches {
		c.n++
	}
	return out, nil
}

// decodeAttention attends the query heads that share one KV head (q, out:
// [group, hd]) to every cached position of one sequence (prefix segments
// first). Each segment's keys and values are a strided [n, KV] matrix at
// column off, so scores = q·Kᵀ and out = P·V are small matrix products in
// which the group's heads share every key and value read. scores is scratch,
// returned for reuse.
func decodeAttention[F gemm.Float](scores, out, q []F, c *Cache[F], l, off, KV, hd int, scale F) []F {
	var buf [4]*Cache[F]
	segs := buf[:0] // oldest last
	total := 0      // this layer's rows, the one appended this step included
	for s := c; s != nil; s = s.prefix {
		segs = append(segs, s)
		total += len(s.k[l]) / KV
	}
	group := len(q) / hd
	if cap(scores) < group*total {
		scores = make([]F, group*total)
	}
	scores = scores[:group*total] // [group, total]
	n := 0
	for i := len(segs) - 1; i >= 0; i-- {
		k := segs[i].k[l]
		rows := len(k) / KV
		if rows > 0 {
			gemm.Serial(false, true, group, rows, hd, scale, q, hd, k[off:], KV, 0, scores[n:], total)
		}
		n += rows
	}
	for g := 0; g < group; g++ {
		row := scores[g*total : (g+1)*total]
		ops.ExpShifted(row, ops.LogSumExp(row))
	}
	clear(out)
	n = 0
	for i := len(segs) - 1; i >= 0; i-- {
		v := segs[i].v[l]
		rows := len(v) / KV
		if rows > 0 {
			gemm.Serial(false, false, group, hd, rows, 1, scores[n:], total, v[off:], KV, 1, out, hd)
		}
		n += rows
	}
	return scores
}
