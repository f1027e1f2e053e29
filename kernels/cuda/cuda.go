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
	h := make([]uint16, len(x))
	for i, v := range x {
		h[i] = safetensors.F32ToBF16(v)
	}
	return m.alloc(2*len(h), unsafe.Pointer(&h[0]))
}

// proj fills a projection: its weight, bias and the adapter's pair.
func (m *Model) proj(p *C.wts_proj, w, bias []float32, pair *lora.Pair[float32], scale float32) error {
	var err error
	if p.w, err = m.weight(w); err != nil {
		return err
	}
	m.WeightBytes += int64(len(w)) * m.elem()
	if p.bias, err = m.f32(bias); err != nil {
		return err
	}
	if pair != nil {
		if p.a, err = m.f32(pair.A); err != nil {
			return err
		}
		if p.b, err = m.f32(pair.B); err != nil {
			return err
		}
		p.rank, p.scale = C.int(len(pair.A)/pair.In), C.float(scale)
	}
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
	if c.HeadDim%2 != 0 || c.Heads%c.KVHeads != 0 {
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
	if cm.embed, err = m.weight(w.Embed); err != nil {
		return nil, err
	}
	if cm.norm, err = m.f32(w.Norm); err != nil {
		return nil, err
	}
	var scale float32
	maxRank := 0
	if ad != nil {
		scale = ad.Scale()
		maxRank = ad.Cfg.Rank
	}
	var headPair *lora.Pair[float32]
	if ad != nil {
		headPair = ad.LMHead
	}
	if c.TieEmbed && headPair == nil {
		cm.head.w = cm.embed
		m.WeightBytes += int64(len(w.Embed)) * m.elem()
	} else if err = m.proj(&cm.head, w.LMHead, nil, headPair, scale); err != nil {
		return nil, err
	}
	cm.layer = (*C.wts_layer)(C.calloc(C.size_t(c.Layers), C.sizeof_wts_layer))
	layers := unsafe.Slice(cm.layer, c.Layers)
	for l := range layers {
		L, wl := &layers[l], &w.Layers[l]
		if L.attn_norm, err = m.f32(wl.AttnNorm); err != nil {
			return nil, err
		}
		if L.mlp_norm, err = m.f32(wl.MLPNorm); err != nil {
			return nil, err
		}
		if L.q_norm, err = m.f32(wl.QNorm); err != nil {
			return nil, err
		}
		if L.k_norm, err = m.f32(wl.KNorm); err != nil {
			return nil, err
		}
		for mod, t := range [lora.NumModules]struct{ w, b []float32 }{
			{wl.Wq, wl.Bq}, {wl.Wk, wl.Bk}, {wl.Wv, wl.Bv}, {wl.Wo, wl.Bo}, {wl.Wg, nil}, {wl.Wu, nil}, {wl.Wd, nil},
		} {
			var pair *lora.Pair[float32]
			if ad != nil {
				pair = ad.Layers[l][mod]
			}
			if err = m.proj(&L.p[mod], t.w, t.b, pair, scale); err != nil {
				return nil, err
			}
		}
	}
	R, KV := o.MaxRows, c.KVDim()
	cm.slots, cm.max_len, cm.max_rows, cm.max_rank = C.int(o.Slots), C.int(o.MaxLen), C.int(R), C.int(maxRank)
	cache := 4 * o.Slots * c.Layers * o.MaxLen * KV
	scratch := []struct {
		dst   **C.float
		elems int
	}{
		{&cm.k_cache, cache / 4}, {&cm.v_cache, cache / 4},
		{&cm.x, R * c.Hidden}, {&cm.h, R * c.Hidden}, {&cm.q, R * c.QDim()}, {&cm.k, R * KV}, {&cm.v, R * KV},
		{&cm.att, R * c.QDim()}, {&cm.g, R * c.Intermediate}, {&cm.u, R * c.Intermediate}, {&cm.lu, R * max(maxRank, 1)},
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
		split := 2 * ((R + 15) / 16 * 16) * max(c.Hidden, c.QDim(), c.Intermediate) // bf16 bytes
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
