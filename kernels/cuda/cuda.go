//go:build cuda

package cuda

/*
#cgo LDFLAGS: -L${SRCDIR}/../../build/cuda -lwtscuda -lcudart_static -ldl -lrt -lpthread -lstdc++ -lm
#include <stdlib.h>
#include "csrc/wts_cuda.h"
*/
import "C"

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/ops"
	"github.com/wts-project/wts/kernels/safetensors"
)

// cudaErr turns a CUDA status into an error naming what failed.
func cudaErr(what string, code C.int) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s (%d)", what, C.GoString(C.wts_error_string(code)), int(code))
}

// Devices lists the node's GPUs with their memory.
func Devices() ([]Device, error) {
	var n C.int
	if code := C.wts_device_count(&n); code != 0 {
		// No driver or no device: a node without GPUs, not a failure.
		return nil, nil
	}
	ds := make([]Device, 0, int(n))
	name := (*C.char)(C.malloc(256))
	defer C.free(unsafe.Pointer(name))
	for i := 0; i < int(n); i++ {
		var total, free C.size_t
		var major, minor C.int
		if err := cudaErr("device info", C.wts_device_info(C.int(i), name, &total, &free, &major, &minor)); err != nil {
			return nil, err
		}
		ds = append(ds, Device{Index: i, Name: C.GoString(name), TotalBytes: uint64(total), FreeBytes: uint64(free),
			Major: int(major), Minor: int(minor)})
	}
	return ds, nil
}

// Bandwidth measures the device's memory bandwidth in GB/s with a copy of
// bytes (read and write both counted).
func Bandwidth(dev int, bytes int64) (float64, error) {
	var g C.double
	err := cudaErr("bandwidth", C.wts_bandwidth(C.int(dev), C.size_t(bytes), 10, &g))
	return float64(g), err
}

// Model is a base model (and optionally one LoRA adapter) resident on one
// device, with its KV cache slots. A Model is used by one goroutine at a
// time: the executor that owns the device.
type Model struct {
	c    *C.wts_model
	cfg  model.Config
	o    Options
	bufs []unsafe.Pointer // device allocations, freed by Close
	// WeightBytes is the bytes of base weights one decode step reads (the
	// embedding lookup aside): the bandwidth bound's numerator.
	WeightBytes int64
}

// alloc allocates bytes on the device and copies src (when not nil) there.
func (m *Model) alloc(bytes int, src unsafe.Pointer) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	if err := cudaErr(fmt.Sprintf("allocate %d bytes", bytes), C.wts_malloc(C.int(m.o.Device), &p, C.size_t(bytes))); err != nil {
		return nil, err
	}
	m.bufs = append(m.bufs, p)
	if src != nil {
		if err := cudaErr("copy to device", C.wts_h2d(C.int(m.o.Device), p, src, C.size_t(bytes))); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// f32 puts a float32 tensor on the device (nil stays nil).
func (m *Model) f32(x []float32) (*C.float, error) {
	if x == nil {
		return nil, nil
	}
	p, err := m.alloc(4*len(x), unsafe.Pointer(&x[0]))
	return (*C.float)(p), err
}

// weight puts a base weight on the device, as bf16 (rounded to nearest
// even) when the model stores bf16.
func (m *Model) weight(x []float32) (unsafe.Pointer, error) {
	if !m.o.BF16 {
		p, err := m.f32(x)
		return unsafe.Pointer(p), err
	}
	h := safetensors.ToHalf(safetensors.BF16, x)
	return m.alloc(2*len(h), unsafe.Pointer(&h[0]))
}

// base puts base weights that read one input of in values on the device
// as one matrix, ws[i] [outs[i], in] row after row, checking their sizes.
func (m *Model) base(name string, in int, outs []int, ws ...[]float32) (unsafe.Pointer, error) {
	for i, w := range ws {
		if len(w) != outs[i]*in {
			return nil, fmt.Errorf("%w: %s has %d values, want %d×%d", kerr.ErrBadModel, name, len(w), outs[i], in)
		}
	}
	all := ws[0]
	if len(ws) > 1 {
		all = slices.Concat(ws...)
	}
	m.WeightBytes += int64(len(all)) * m.elem()
	return m.weight(all)
}

// vec puts a norm or bias of n values on the device, several row after
// row; one the model does not have (want false) stays NULL.
func (m *Model) vec(name string, n int, want bool, xs ...[]float32) (*C.float, error) {
	if !want {
		return nil, nil
	}
	var all []float32
	for _, x := range xs {
		all = append(all, x...)
	}
	if len(all) != n {
		return nil, fmt.Errorf("%w: %s has %d values, want %d", kerr.ErrBadModel, name, len(all), n)
	}
	return m.f32(all)
}

// lora puts a projection's LoRA pair on the device (a nil pair: none).
func (m *Model) lora(p *C.wts_lora, pair *lora.Pair[float32], rank int, scale float32, out, in int) error {
	if pair == nil {
		return nil
	}
	if pair.In != in || pair.Out != out || len(pair.A) != rank*in || len(pair.B) != out*rank {
		return fmt.Errorf("%w: a LoRA pair of %d×%d with %d and %d values for a %d×%d projection at rank %d",
			kerr.ErrBadAdapter, pair.Out, pair.In, len(pair.A), len(pair.B), out, in, rank)
	}
	var err error
	if p.a, err = m.f32(pair.A); err != nil {
		return err
	}
	if p.b, err = m.f32(pair.B); err != nil {
		return err
	}
	p.rank, p.scale = C.int(rank), C.float(scale)
	return nil
}

func (m *Model) elem() int64 {
	if m.o.BF16 {
		return 2
	}
	return 4
}

// Load puts w (and the adapter ad, nil for the base model) on the device
// o.Device with o's slots and rows.
func Load(w *model.Weights[float32], ad *lora.Adapter[float32], o Options) (mod *Model, err error) {
	c := w.Cfg
	if o.Slots < 1 || o.MaxRows < 1 || o.MaxLen < 2 || o.MaxLen > min(c.MaxPos, 32768) {
		return nil, fmt.Errorf("cuda: options %+v: slots and rows at least 1, length 2..%d", o, min(c.MaxPos, 32768))
	}
	if c.KVHeads < 1 || c.HeadDim%2 != 0 || c.HeadDim > 256 || c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("%w: head_dim %d, heads %d over %d", model.ErrUnsupported, c.HeadDim, c.Heads, c.KVHeads)
	}
	m := &Model{c: (*C.wts_model)(C.calloc(1, C.sizeof_wts_model)), cfg: c, o: o}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	cm := m.c
	cm.dev, cm.vocab, cm.hidden, cm.inter, cm.layers = C.int(o.Device), C.int(c.Vocab), C.int(c.Hidden), C.int(c.Intermediate), C.int(c.Layers)
	cm.heads, cm.kv_heads, cm.head_dim, cm.eps = C.int(c.Heads), C.int(c.KVHeads), C.int(c.HeadDim), C.float(c.RMSEps)
	if o.BF16 {
		cm.bf16 = 1
	}
	if o.Graphs {
		cm.use_graphs = 1
	}
	inv := ops.InvFreq(c)
	inv32 := make([]float32, len(inv))
	for i, f := range inv {
		inv32[i] = float32(f)
	}
	if cm.inv_freq, err = m.f32(inv32); err != nil {
		return nil, err
	}
	D, Q, KV, I, hd := c.Hidden, c.QDim(), c.KVDim(), c.Intermediate, c.HeadDim
	if len(w.Embed) != c.Vocab*D || len(w.Layers) != c.Layers {
		return nil, fmt.Errorf("%w: %d embedding values and %d layers for the config's %d×%d and %d", kerr.ErrBadModel,
			len(w.Embed), len(w.Layers), c.Vocab, D, c.Layers)
	}
	if cm.embed, err = m.weight(w.Embed); err != nil {
		return nil, err
	}
	if cm.norm, err = m.vec("model.norm", D, true, w.Norm); err != nil {
		return nil, err
	}
	var scale float32
	rank := 0
	if ad != nil {
		scale, rank = ad.Scale(), ad.Cfg.Rank
		if len(ad.Layers) != c.Layers {
			return nil, fmt.Errorf("%w: %d layers for a model of %d", kerr.ErrBadAdapter, len(ad.Layers), c.Layers)
		}
		if err = m.lora(&cm.head_lora, ad.LMHead, rank, scale, c.Vocab, D); err != nil {
			return nil, err
		}
	}
	if c.TieEmbed {
		cm.head = cm.embed
		m.WeightBytes += int64(len(w.Embed)) * m.elem()
	} else if cm.head, err = m.base("lm_head", D, []int{c.Vocab}, w.LMHead); err != nil {
		return nil, err
	}
	cm.layer = (*C.wts_layer)(C.calloc(C.size_t(c.Layers), C.sizeof_wts_layer))
	layers := unsafe.Slice(cm.layer, c.Layers)
	for l := range layers {
		L, wl := &layers[l], &w.Layers[l]
		name := func(what string) string { return fmt.Sprintf("layer %d %s", l, what) }
		if L.attn_norm, err = m.vec(name("input_layernorm"), D, true, wl.AttnNorm); err != nil {
			return nil, err
		}
		if L.mlp_norm, err = m.vec(name("post_attention_layernorm"), D, true, wl.MLPNorm); err != nil {
			return nil, err
		}
		if L.q_norm, err = m.vec(name("q_norm"), hd, c.QKNorm, wl.QNorm); err != nil {
			return nil, err
		}
		if L.k_norm, err = m.vec(name("k_norm"), hd, c.QKNorm, wl.KNorm); err != nil {
			return nil, err
		}
		if L.qkv, err = m.base(name("q, k and v"), D, []int{Q, KV, KV}, wl.Wq, wl.Wk, wl.Wv); err != nil {
			return nil, err
		}
		if L.o, err = m.base(name("o"), Q, []int{D}, wl.Wo); err != nil {
			return nil, err
		}
		if L.gate_up, err = m.base(name("gate and up"), D, []int{I, I}, wl.Wg, wl.Wu); err != nil {
			return nil, err
		}
		if L.down, err = m.base(name("down"), I, []int{D}, wl.Wd); err != nil {
			return nil, err
		}
		if L.qkv_bias, err = m.vec(name("q, k and v biases"), Q+2*KV, c.QKVBias, wl.Bq, wl.Bk, wl.Bv); err != nil {
			return nil, err
		}
		if L.o_bias, err = m.vec(name("o bias"), D, c.OBias, wl.Bo); err != nil {
			return nil, err
		}
		if ad != nil {
			for mod := lora.Module(0); mod < lora.NumModules; mod++ {
				out, in := mod.Dims(c)
				if err = m.lora(&L.lora[mod], ad.Layers[l][mod], rank, scale, out, in); err != nil {
					return nil, err
				}
			}
		}
	}
	R := o.MaxRows
	cm.slots, cm.max_len, cm.max_rows, cm.max_rank = C.int(o.Slots), C.int(o.MaxLen), C.int(R), C.int(rank)
	cache := o.Slots * c.Layers * o.MaxLen * KV
	scratch := []struct {
		dst   **C.float
		elems int
	}{
		{&cm.k_cache, cache}, {&cm.v_cache, cache}, {&cm.x, R * D}, {&cm.h, R * D}, {&cm.qkv, R * (Q + 2*KV)},
		{&cm.q, R * Q}, {&cm.att, R * Q}, {&cm.gu, R * 2 * I}, {&cm.a, R * I}, {&cm.lu, R * max(rank, 1)},
		{&cm.logits, R * c.Vocab},
	}
	for _, s := range scratch {
		p, err := m.alloc(4*s.elems, nil)
		if err != nil {
			return nil, err
		}
		*s.dst = (*C.float)(p)
	}
	if o.BF16 {
		split := 2 * ((R + 15) / 16 * 16) * max(D, Q, I) // bf16 bytes
		if cm.xh, err = m.alloc(split, nil); err != nil {
			return nil, err
		}
		if cm.xl, err = m.alloc(split, nil); err != nil {
			return nil, err
		}
	}
	p, err := m.alloc(4*4*R, nil)
	if err != nil {
		return nil, err
	}
	cm.rows, cm.next = (*C.int)(p), (*C.int)(unsafe.Add(p, 4*3*R))
	if err := cudaErr("model init", C.wts_model_init(cm)); err != nil {
		return nil, err
	}
	return m, nil
}

// Step runs one forward of len(tokens) rows: row i is token tokens[i] at
// position pos[i] of KV cache slot slots[i] (its K and V are stored there
// first, so a prompt's rows attend causally to each other). It returns
// each row's greedy next token, and fills logits [rows, V] when it is not
// nil.
func (m *Model) Step(tokens, slots, pos []int, logits []float32) ([]int, error) {
	n := len(tokens)
	if n < 1 || n > m.o.MaxRows || len(slots) != n || len(pos) != n {
		return nil, fmt.Errorf("cuda: a step of %d rows (%d slots, %d positions), at most %d", n, len(slots), len(pos), m.o.MaxRows)
	}
	if logits != nil && len(logits) < n*m.cfg.Vocab {
		return nil, fmt.Errorf("cuda: logits buffer of %d values for %d rows of %d", len(logits), n, m.cfg.Vocab)
	}
	in := make([]C.int, 3*n)
	for i := range n {
		if tokens[i] < 0 || tokens[i] >= m.cfg.Vocab {
			return nil, fmt.Errorf("%w: token id %d, vocabulary [0, %d)", kerr.ErrTokenRange, tokens[i], m.cfg.Vocab)
		}
		if slots[i] < 0 || slots[i] >= m.o.Slots || pos[i] < 0 || pos[i] >= m.o.MaxLen {
			return nil, fmt.Errorf("%w: slot %d position %d (slots %d, length %d)", kerr.ErrTooLong, slots[i], pos[i], m.o.Slots, m.o.MaxLen)
		}
		in[i], in[n+i], in[2*n+i] = C.int(tokens[i]), C.int(slots[i]), C.int(pos[i])
	}
	next := make([]C.int, n)
	var lp *C.float
	if logits != nil {
		lp = (*C.float)(unsafe.Pointer(&logits[0]))
	}
	if err := cudaErr("step", C.wts_model_step(m.c, C.int(n), &in[0], &in[n], &in[2*n], &next[0], lp)); err != nil {
		return nil, err
	}
	out := make([]int, n)
	for i, t := range next {
		if out[i] = int(t); out[i] < 0 || out[i] >= m.cfg.Vocab {
			// No logit beat -FLT_MAX: the row's logits are not finite.
			return nil, fmt.Errorf("%w: row %d has no finite logit", kerr.ErrNonFinite, i)
		}
	}
	return out, nil
}

// Close frees the model's device memory.
func (m *Model) Close() {
	if m.c == nil {
		return
	}
	C.wts_model_release(m.c)
	for _, p := range m.bufs {
		C.wts_free(C.int(m.o.Device), p)
	}
	m.bufs = nil
	C.free(unsafe.Pointer(m.c.layer))
	C.free(unsafe.Pointer(m.c))
	m.c = nil
}
