package transformer

import (
	"fmt"
	"math"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/ops"
	"github.com/wts-project/wts/kernels/par"
)

// Cache holds one sequence's keys and values (after RoPE) for every layer.
// A cache may sit on a read-only prefix (a prompt shared by several samples):
// attention then reads the prefix's entries first and its own after them.
//
// Each layer's keys are stored head-major, [KVHeads][capacity][hd], so that
// attention over one KV head reads one sequential block. Stored as the
// projections give them ([n, KV] rows), a head's keys were a 256-byte
// slice of every 1 KB row, and decode attention, bound by memory latency,
// read them a fifth slower at 80 positions and a third slower at 1,024.
type Cache[F gemm.Float] struct {
	k, v     [][]F // per layer: [KVHeads][capacity][hd]
	n        int   // positions held, the prefix's excluded
	capacity int   // positions each head's block has room for
	prefix   *Cache[F]
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
// decoding writes in place: grown step by step, a cache is copied over and
// over, which cost a tenth of batched decoding of the Qwen3 shape.
func (m *Model[F]) Reserve(c *Cache[F], rows int) {
	m.grow(c, c.n+rows)
}

// grow gives c room for need positions (by at least a quarter, so that
// growing a step at a time copies rarely), keeping what it holds.
func (m *Model[F]) grow(c *Cache[F], need int) {
	if need <= c.capacity {
		return
	}
	cfg := m.W.Cfg
	H, hd := cfg.KVHeads, cfg.HeadDim
	capacity := max(need, c.capacity+c.capacity/4)
	move := func(old []F) []F {
		blk := make([]F, H*capacity*hd)
		for g := 0; g < H && old != nil; g++ {
			copy(blk[g*capacity*hd:g*capacity*hd+c.n*hd], old[g*c.capacity*hd:g*c.capacity*hd+c.n*hd])
		}
		return blk
	}
	for l := range c.k {
		c.k[l], c.v[l] = move(c.k[l]), move(c.v[l])
	}
	c.capacity = capacity
}

// put writes T new positions of layer l (k, v: [T, KV] as the projections
// give them) after the n held; grow must have made room.
func (c *Cache[F]) put(l int, k, v []F, T, H, hd int) {
	KV := H * hd
	for t := 0; t < T; t++ {
		for g := 0; g < H; g++ {
			c.putHead(l, g, t, k[t*KV+g*hd:t*KV+(g+1)*hd], v[t*KV+g*hd:t*KV+(g+1)*hd])
		}
	}
}

// putHead writes KV head g's key and value ([hd] each) of new position t
// (counted after the n held) in layer l.
func (c *Cache[F]) putHead(l, g, t int, k, v []F) {
	hd := len(k)
	at := (g*c.capacity + c.n + t) * hd
	copy(c.k[l][at:at+hd], k)
	copy(c.v[l][at:at+hd], v)
}

// layout is where attention finds c's positions of one layer: position s
// of KV head g at s·hd + g·capacity·hd.
func (c *Cache[F]) layout(hd int) ops.KVLayout {
	return ops.KVLayout{Row: hd, Head: c.capacity * hd}
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
	m.grow(c, c.n+len(tokens))
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
	D, Q, KV, H, hd := cfg.Hidden, cfg.QDim(), cfg.KVDim(), cfg.Heads, cfg.HeadDim
	s := m.newStep(tokens, pos, nil)
	hidden := make([]F, len(tokens)*D)
	for k, i := range batch {
		m.grow(caches[i], start[k+1]-start[k])
	}
	m.cachedForward(groupRows(rowZ), s, hidden, nil, func(l int) {
		s.ropeAll(cfg)
		for k, i := range batch {
			lo, hi, c := start[k], start[k+1], caches[i]
			c.put(l, s.k[lo*KV:hi*KV], s.v[lo*KV:hi*KV], hi-lo, cfg.KVHeads, hd)
			ops.Attention(s.attn[lo*Q:hi*Q], nil, s.q[lo*Q:hi*Q], c.k[l], c.v[l], hi-lo, hi-lo, H, cfg.KVHeads, hd, c.layout(hd))
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

// ropeAll rotates every row's query and key heads.
func (s *step[F]) ropeAll(c model.Config) {
	T := len(s.q) / c.QDim()
	s.rope.Rope(s.q, T, c.Heads)
	s.rope.Rope(s.k, T, c.KVHeads)
}

func (m *Model[F]) newStep(tokens, pos []int, ar *Arena[F]) *step[F] {
	c := m.W.Cfg
	T, D, Q, KV, I := len(tokens), c.Hidden, c.QDim(), c.KVDim(), c.Intermediate
	s := &step[F]{x: ar.Alloc(T * D), h: ar.Alloc(T * D), q: ar.Alloc(T * Q), k: ar.Alloc(T * KV), v: ar.Alloc(T * KV),
		attn: ar.Alloc(T * Q), g: ar.Alloc(T * I), u: ar.Alloc(T * I), rope: m.rope.Table(pos)}
	m.embed(s.x, tokens)
	return s
}

// cachedForward runs every layer over the rows of s, with attend filling
// s.attn for layer l once s.q, s.k and s.v hold the new queries, keys and
// values, RoPE not yet applied (attend applies it where it reads them). It leaves
// the final normed hidden states in out. Its scratch comes from ar (nil
// allocates).
func (m *Model[F]) cachedForward(gs []rowGroup[F], s *step[F], out []F, ar *Arena[F], attend func(l int)) {
	c := m.W.Cfg
	T, D, Q, KV, I := len(s.x)/c.Hidden, c.Hidden, c.QDim(), c.KVDim(), c.Intermediate
	inv := ar.Alloc(T)
	qInv, kInv := ar.Alloc(T*c.Heads), ar.Alloc(T*c.KVHeads) // Qwen3 head-norm factors
	lu := ar.Alloc(3 * T * maxRank(gs))                      // up to three projections read one input
	var l int
	termOf := func(ts *terms[F], mod lora.Module) term[F] { return ts.term(l, mod) }
	linear := func(x []F, in int, ps ...proj[F]) { linearRows(x, T, in, ps, gs, 0, termOf, lu) }
	for l = 0; l < c.Layers; l++ {
		w, pw := &m.W.Layers[l], &m.proj[l]
		ops.RMSNorm(s.h, inv, s.x, w.AttnNorm, T, D, c.RMSEps)
		linear(s.h, D, proj[F]{s.q, Q, pw[lora.Q], w.Bq, lora.Q}, proj[F]{s.k, KV, pw[lora.K], w.Bk, lora.K},
			proj[F]{s.v, KV, pw[lora.V], w.Bv, lora.V})
		if c.QKNorm {
			ops.HeadNorm(s.q, s.attn, qInv, w.QNorm, T, c.Heads, c.HeadDim, c.RMSEps)
			ops.HeadNorm(s.k, s.attn, kInv, w.KNorm, T, c.KVHeads, c.HeadDim, c.RMSEps)
		}
		attend(l)
		o := s.h // the normed input is dead now; reuse it for o_proj
		linear(s.attn, Q, proj[F]{o, D, pw[lora.O], w.Bo, lora.O})
		ops.Add(s.x, o)
		ops.RMSNorm(s.h, inv, s.x, w.MLPNorm, T, D, c.RMSEps)
		linear(s.h, D, proj[F]{s.g, I, pw[lora.Gate], nil, lora.Gate}, proj[F]{s.u, I, pw[lora.Up], nil, lora.Up})
		ops.SwiGLU(s.g, s.g, s.u)
		linear(s.g, I, proj[F]{s.h, D, pw[lora.Down], nil, lora.Down})
		ops.Add(s.x, s.h)
	}
	ops.RMSNorm(out, inv, s.x, m.W.Norm, T, D, c.RMSEps)
}

func (m *Model[F]) extendChunk(z *Frozen[F], c *Cache[F], tokens []int, out []F) {
	cfg := m.W.Cfg
	T, hd := len(tokens), cfg.HeadDim
	pos := make([]int, T)
	for i := range pos {
		pos[i] = c.n + i
	}
	s := m.newStep(tokens, pos, nil)
	m.cachedForward([]rowGroup[F]{{ts: z.view(), lo: 0, hi: T}}, s, out, nil, func(l int) {
		s.ropeAll(cfg)
		c.put(l, s.k, s.v, T, cfg.KVHeads, hd)
		ops.Attention(s.attn, nil, s.q, c.k[l], c.v[l], T, c.n+T, cfg.Heads, cfg.KVHeads, hd, c.layout(hd))
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
	return m.DecodeRows(zs, caches, tokens, nil)
}

// DecodeRows is Decode where row b samples from adapter zs[b] (nil: the
// base model): sequences of several samplers over one base model decode in
// one pass, every base product once for all rows and each adapter's LoRA
// terms on its own (consecutive) rows. The step's scratch and the hidden
// states it returns come from ar (nil allocates): a step allocated a third of
// a megabyte for 16 rows of the small model, every step.
func (m *Model[F]) DecodeRows(zs []*Frozen[F], caches []*Cache[F], tokens []int, ar *Arena[F]) ([]F, error) {
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
	for _, c := range caches {
		m.grow(c, c.n+1)
	}
	s := m.newStep(tokens, pos, ar)
	out := ar.Alloc(B * cfg.Hidden)
	shares := shareGroups(caches)
	m.cachedForward(groupRows(zs), s, out, ar, func(l int) {
		Q, group := cfg.QDim(), cfg.Heads/cfg.KVHeads
		scale := F(1 / math.Sqrt(float64(hd)))
		work := 2 * group * caches[0].Len() * hd // one sequence's q·kᵀ and p·v for a KV head (a share of several does more)
		// Each (share, KV head) ropes its sequences' query groups and keys
		// and writes their keys and values into the caches where it
		// attends: done serially first, the cache writes alone (each a cold
		// line) took a third of a millisecond of a 16-stream step of the
		// small model while the other core waited.
		par.For(len(shares)*cfg.KVHeads, par.MinChunk(work, 1), func(lo, hi int) {
			var sc []F
			for i := lo; i < hi; i++ {
				bs, g := shares[i/cfg.KVHeads], i%cfg.KVHeads
				for _, b := range bs {
					k := s.k[b*KV+g*hd : b*KV+(g+1)*hd]
					s.rope.RopeRow(s.q[b*Q+g*group*hd:b*Q+(g+1)*group*hd], b)
					s.rope.RopeRow(k, b)
					caches[b].putHead(l, g, 0, k, s.v[b*KV+g*hd:b*KV+(g+1)*hd])
				}
				sc = decodeAttention(sc, s.attn, s.q, caches, bs, l, g, group, hd, Q, scale)
			}
		})
	})
	for _, c := range caches {
		c.n++
	}
	return out, nil
}

// maxShare bounds the sequences that attend together over their shared
// prefix: sixteen already read it a sixteenth as often, and more would
// leave too few (share, KV head) pairs to spread over the cores.
const maxShare = 16

// minShared is the shortest prefix (positions) attended as a group. Below
// it the samples' own reads of the prefix hit the caches anyway: with
// prompts of 16–256 tokens, 16 samples of the small model took as long a
// step either way within this machine's noise, and one pair of
// enginebench runs at 16 had grouping 10% slower. A variable so that
// tests can group the tiny models' short prompts.
var minShared = 256

// shareGroups groups the rows of a decode step whose caches continue one
// prefix of at least minShared positions (the prompt's cache, forked for
// each sample) and hold as many positions of their own (sampled in step),
// at most maxShare to a group, so that attention reads the prefix's keys
// and values once for the group, as one product of all its query rows
// instead of a two-row product per sample, which makes a step of many
// samples of one long prompt markedly shorter (`wts bench sample`'s long
// prompts show it). Other rows are groups of one.
func shareGroups[F gemm.Float](caches []*Cache[F]) [][]int {
	type key struct {
		prefix *Cache[F]
		n      int
	}
	var groups [][]int
	open := map[key]int{} // the group still taking rows, by key
	for b, c := range caches {
		k := key{c.prefix, c.n}
		if i, ok := open[k]; ok && c.prefix != nil && c.prefix.Len() >= minShared && len(groups[i]) < maxShare {
			groups[i] = append(groups[i], b)
			continue
		}
		open[k] = len(groups)
		groups = append(groups, []int{b})
	}
	return groups
}

// decodeAttention attends, for each sequence b of bs (caches that share
// one prefix chain and hold as many positions of their own), the group
// query heads that share KV head g (in q and out, [B, Q] for the whole
// step: b's at b·Q + g·group·hd, [group, hd]) to every cached position in
// layer l: the prefix segments first, then b's own positions and the one
// this step put there (not yet counted in n). Each segment's keys and
// values for g are one [rows, hd] block, so scores = q·Kᵀ and out = P·V are
// small matrix products in which all of bs's query rows share each prefix
// key and value read, and a sequence's heads share its own. sc is
// scratch, returned for reuse.
func decodeAttention[F gemm.Float](sc, out, q []F, caches []*Cache[F], bs []int, l, g, group, hd, Q int, scale F) []F {
	var buf [4]*Cache[F]
	segs := buf[:0] // the shared prefix chain, newest first
	shared := 0     // its positions
	for s := caches[bs[0]].prefix; s != nil; s = s.prefix {
		segs = append(segs, s)
		shared += s.n
	}
	own := caches[bs[0]].n + 1 // each cache's own positions in layer l
	total := shared + own
	R, w := len(bs)*group, group*hd // query rows; one sequence's floats of them
	if need := 2*R*hd + R*total; cap(sc) < need {
		sc = make([]F, need)
	}
	qs, os, scores := sc[:R*hd], sc[R*hd:2*R*hd], sc[2*R*hd:2*R*hd+R*total] // [R, hd], [R, hd], [R, total]
	for j, b := range bs {
		at := b*Q + g*w
		copy(qs[j*w:(j+1)*w], q[at:at+w])
	}
	n := 0
	for i := len(segs) - 1; i >= 0; i-- {
		if r := segs[i].n; r > 0 {
			gemm.Serial(false, true, R, r, hd, scale, qs, hd, segs[i].k[l][g*segs[i].capacity*hd:], hd, 0, scores[n:], total)
			n += r
		}
	}
	for j, b := range bs {
		c := caches[b]
		gemm.Serial(false, true, group, own, hd, scale, qs[j*w:], hd, c.k[l][g*c.capacity*hd:], hd, 0, scores[j*group*total+shared:], total)
	}
	for r := 0; r < R; r++ {
		ops.Softmax(scores[r*total : (r+1)*total])
	}
	clear(os)
	n = 0
	for i := len(segs) - 1; i >= 0; i-- {
		if r := segs[i].n; r > 0 {
			gemm.Serial(false, false, R, hd, r, 1, scores[n:], total, segs[i].v[l][g*segs[i].capacity*hd:], hd, 1, os, hd)
			n += r
		}
	}
	for j, b := range bs {
		c := caches[b]
		gemm.Serial(false, false, group, hd, own, 1, scores[j*group*total+shared:], total, c.v[l][g*c.capacity*hd:], hd, 1, os[j*w:], hd)
		at := b*Q + g*w
		copy(out[at:at+w], os[j*w:(j+1)*w])
	}
	return sc
}
