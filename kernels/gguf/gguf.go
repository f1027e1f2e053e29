// Package gguf writes a model folder as a GGUF file (version 3), the format
// llama.cpp loads, so that the benchmarks can run llama.cpp on the very
// weights wts serves: the HF tensors under llama.cpp's names, the shape and
// RoPE settings as metadata, and the byte-level BPE tokenizer.
//
// llama.cpp rotates a Llama model's query and key heads in interleaved
// pairs where HF rotates halves, so its converter permutes those rows;
// Qwen 2 and 3 use the halves (NeoX) order and keep theirs. The export
// does the same.
package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/kernels/tokenizer"
)

// Version is the GGUF version written.
const Version = 3

// alignment of the tensor data (general.alignment's default).
const alignment = 32

// Tensor element types.
const (
	F32  = 0
	F16  = 1
	BF16 = 30
)

// metadata value types.
const (
	tUint32  = 4
	tInt32   = 5
	tFloat32 = 6
	tString  = 8
	tArray   = 9
)

// kv is one metadata entry.
type kv struct {
	key string
	typ uint32
	val any // uint32, int32, float32, string, []string, []int32
}

// tensor is one tensor to write: its GGUF name, its shape in GGUF order
// (the innermost, contiguous dimension first) and its values.
type tensor struct {
	name string
	dims []uint64
	data []float32
}

// ErrUnsupported is a model the export cannot carry over faithfully.
var ErrUnsupported = errors.New("gguf: unsupported")

// Export writes the model folder dir to out as GGUF, its matrices as
// dtype (F32, F16 or BF16; norms and biases stay F32).
func Export(dir string, dtype uint32, out string) error {
	if size(dtype) == 0 {
		return fmt.Errorf("gguf: element type %d: F32, F16 or BF16", dtype)
	}
	w, err := model.Load(dir)
	if err != nil {
		return err
	}
	c := w.Cfg
	if c.RopeScaling != nil {
		return fmt.Errorf("%w: rope scaling %q (llama.cpp takes it as a rope_freqs tensor, which the export does not write)", ErrUnsupported, c.RopeScaling.Type)
	}
	arch := c.ModelType
	if arch != "llama" && arch != "qwen2" && arch != "qwen3" {
		return fmt.Errorf("%w: model_type %q", ErrUnsupported, arch)
	}
	meta := []kv{
		{"general.architecture", tString, arch},
		{"general.name", tString, filepath.Base(dir)},
		{"general.file_type", tUint32, fileType[dtype]},
		{"general.alignment", tUint32, uint32(alignment)},
		{arch + ".context_length", tUint32, uint32(c.MaxPos)},
		{arch + ".embedding_length", tUint32, uint32(c.Hidden)},
		{arch + ".block_count", tUint32, uint32(c.Layers)},
		{arch + ".feed_forward_length", tUint32, uint32(c.Intermediate)},
		{arch + ".attention.head_count", tUint32, uint32(c.Heads)},
		{arch + ".attention.head_count_kv", tUint32, uint32(c.KVHeads)},
		{arch + ".attention.key_length", tUint32, uint32(c.HeadDim)},
		{arch + ".attention.value_length", tUint32, uint32(c.HeadDim)},
		{arch + ".rope.dimension_count", tUint32, uint32(c.HeadDim)},
		{arch + ".rope.freq_base", tFloat32, float32(c.RopeTheta)},
		{arch + ".attention.layer_norm_rms_epsilon", tFloat32, float32(c.RMSEps)},
		{arch + ".vocab_size", tUint32, uint32(c.Vocab)},
	}
	vocab, err := vocabulary(dir, c)
	if err != nil {
		return err
	}
	return writeFile(out, append(meta, vocab...), tensors(w), dtype)
}

// vocabulary is the tokenizer's metadata: llama.cpp's "gpt2" model (byte-
// level BPE) with its tokens, their types, the merges and the special ids.
// A folder without a tokenizer.json (the tiny presets) gets one token per
// id ("<id>") and no merges: llama.cpp needs a vocabulary to load, and the
// benchmarks give it ids.
func vocabulary(dir string, c model.Config) ([]kv, error) {
	var toks []string
	var merges []string
	special, pre := func(int) bool { return false }, "default"
	path := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(path); err == nil {
		t, err := tokenizer.Load(path)
		if err != nil {
			return nil, err
		}
		if toks = t.Tokens(); len(toks) > c.Vocab {
			return nil, fmt.Errorf("%w: the tokenizer has %d ids, the model %d", ErrUnsupported, len(toks), c.Vocab)
		}
		for _, m := range t.Merges() {
			merges = append(merges, m[0]+" "+m[1])
		}
		special = t.Special
		pre = map[*tokenizer.Pattern]string{tokenizer.GPT2: "gpt-2", tokenizer.Llama3: "llama-bpe", tokenizer.Qwen2: "qwen2"}[t.Pattern()]
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	names, types := make([]string, c.Vocab), make([]int32, c.Vocab)
	for id := range names {
		switch {
		case toks == nil:
			names[id], types[id] = fmt.Sprintf("<%d>", id), 1 // normal
		case id >= len(toks) || toks[id] == "":
			names[id], types[id] = fmt.Sprintf("[PAD%d]", id), 5 // unused
		case special(id):
			names[id], types[id] = toks[id], 3 // control
		default:
			names[id], types[id] = toks[id], 1
		}
	}
	return []kv{
		{"tokenizer.ggml.model", tString, "gpt2"},
		{"tokenizer.ggml.pre", tString, pre},
		{"tokenizer.ggml.tokens", tArray, names},
		{"tokenizer.ggml.token_type", tArray, types},
		{"tokenizer.ggml.merges", tArray, merges},
		{"tokenizer.ggml.bos_token_id", tUint32, uint32(c.BOS)},
		{"tokenizer.ggml.eos_token_id", tUint32, uint32(c.EOS)},
	}, nil
}

// tensors lists w's tensors under llama.cpp's names, a Llama's query and
// key rows permuted to its pair order.
func tensors(w *model.Weights[float32]) []tensor {
	c := w.Cfg
	mat := func(name string, data []float32, rows, cols int) tensor {
		return tensor{name, []uint64{uint64(cols), uint64(rows)}, data}
	}
	vec := func(name string, data []float32) tensor { return tensor{name, []uint64{uint64(len(data))}, data} }
	qk := func(data []float32, heads, cols int) []float32 { return data }
	if c.ModelType == "llama" {
		qk = func(data []float32, heads, cols int) []float32 { return pairOrder(data, heads, c.HeadDim, cols) }
	}
	D, Q, KV, I := c.Hidden, c.QDim(), c.KVDim(), c.Intermediate
	ts := []tensor{mat("token_embd.weight", w.Embed, c.Vocab, D)}
	for l, L := range w.Layers {
		b := fmt.Sprintf("blk.%d.", l)
		ts = append(ts, vec(b+"attn_norm.weight", L.AttnNorm),
			mat(b+"attn_q.weight", qk(L.Wq, c.Heads, D), Q, D),
			mat(b+"attn_k.weight", qk(L.Wk, c.KVHeads, D), KV, D),
			mat(b+"attn_v.weight", L.Wv, KV, D),
			mat(b+"attn_output.weight", L.Wo, D, Q))
		for _, bias := range []struct {
			name  string
			data  []float32
			heads int
		}{{"attn_q.bias", L.Bq, c.Heads}, {"attn_k.bias", L.Bk, c.KVHeads}, {"attn_v.bias", L.Bv, 0}, {"attn_output.bias", L.Bo, 0}} {
			switch {
			case bias.data == nil:
			case bias.heads > 0:
				ts = append(ts, vec(b+bias.name, qk(bias.data, bias.heads, 1)))
			default:
				ts = append(ts, vec(b+bias.name, bias.data))
			}
		}
		if L.QNorm != nil {
			ts = append(ts, vec(b+"attn_q_norm.weight", L.QNorm), vec(b+"attn_k_norm.weight", L.KNorm))
		}
		ts = append(ts, vec(b+"ffn_norm.weight", L.MLPNorm),
			mat(b+"ffn_gate.weight", L.Wg, I, D), mat(b+"ffn_up.weight", L.Wu, I, D), mat(b+"ffn_down.weight", L.Wd, D, I))
	}
	ts = append(ts, vec("output_norm.weight", w.Norm))
	if !c.TieEmbed {
		ts = append(ts, mat("output.weight", w.LMHead, c.Vocab, D))
	}
	return ts
}

// pairOrder permutes the rows of a query or key projection (heads × hd
// rows of cols values) from HF's halves order, where row j of a head
// pairs with row j+hd/2 under RoPE, to llama.cpp's, where rows 2j and
// 2j+1 pair: its row 2j+c is HF's row c·hd/2+j.
func pairOrder(data []float32, heads, hd, cols int) []float32 {
	out := make([]float32, len(data))
	for h := range heads {
		for j := range hd / 2 {
			for c := range 2 {
				dst, src := (h*hd+2*j+c)*cols, (h*hd+c*hd/2+j)*cols
				copy(out[dst:dst+cols], data[src:src+cols])
			}
		}
	}
	return out
}

// writeFile writes the header, the metadata, the tensor infos and the
// tensors' data, each tensor aligned.
func writeFile(path string, meta []kv, ts []tensor, dtype uint32) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	e := &enc{w: bw}
	e.u32(0x46554747) // "GGUF"
	e.u32(Version)
	e.u64(uint64(len(ts)))
	e.u64(uint64(len(meta)))
	for _, m := range meta {
		e.str(m.key)
		e.value(m.typ, m.val)
	}
	var offset uint64
	types := make([]uint32, len(ts))
	for i, t := range ts {
		types[i] = dtype
		if len(t.dims) == 1 {
			types[i] = F32 // norms and biases stay float32, as llama.cpp's converter keeps them
		}
		e.str(t.name)
		e.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			e.u64(d)
		}
		e.u32(types[i])
		e.u64(offset)
		offset = align(offset + uint64(len(t.data))*size(types[i]))
	}
	e.pad()
	for i, t := range ts {
		for _, v := range t.data {
			switch types[i] {
			case F16:
				e.u16(safetensors.F32ToF16(v))
			case BF16:
				e.u16(safetensors.F32ToBF16(v))
			default:
				e.u32(math.Float32bits(v))
			}
		}
		e.pad()
	}
	if e.err == nil {
		e.err = bw.Flush()
	}
	if err := f.Close(); e.err == nil {
		e.err = err
	}
	return e.err
}

// size is an element's bytes, 0 for a type the export does not write.
func size(typ uint32) uint64 {
	switch typ {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

// fileType is general.file_type for the matrices' element type (llama.cpp's
// LLAMA_FTYPE: all F32, mostly F16, mostly BF16).
var fileType = map[uint32]uint32{F32: 0, F16: 1, BF16: 32}

func align(n uint64) uint64 { return (n + alignment - 1) / alignment * alignment }

// enc writes little-endian values, keeping the first error and the count.
type enc struct {
	w   io.Writer
	n   uint64
	err error
	buf [8]byte
}

func (e *enc) write(b []byte) {
	if e.err != nil {
		return
	}
	var k int
	k, e.err = e.w.Write(b)
	e.n += uint64(k)
}

func (e *enc) u16(v uint16) { binary.LittleEndian.PutUint16(e.buf[:2], v); e.write(e.buf[:2]) }
func (e *enc) u32(v uint32) { binary.LittleEndian.PutUint32(e.buf[:4], v); e.write(e.buf[:4]) }
func (e *enc) u64(v uint64) { binary.LittleEndian.PutUint64(e.buf[:8], v); e.write(e.buf[:8]) }

func (e *enc) str(s string) {
	e.u64(uint64(len(s)))
	e.write([]byte(s))
}

// pad writes zeros up to the next alignment.
func (e *enc) pad() {
	if n := align(e.n) - e.n; n > 0 {
		e.write(make([]byte, n))
	}
}

// value writes a metadata value's type and the value.
func (e *enc) value(typ uint32, v any) {
	e.u32(typ)
	switch x := v.(type) {
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case string:
		e.str(x)
	case []string:
		e.u32(tString)
		e.u64(uint64(len(x)))
		for _, s := range x {
			e.str(s)
		}
	case []int32:
		e.u32(tInt32)
		e.u64(uint64(len(x)))
		for _, i := range x {
			e.u32(uint32(i))
		}
	default:
		e.err = fmt.Errorf("gguf: metadata value %T", v)
	}
}
