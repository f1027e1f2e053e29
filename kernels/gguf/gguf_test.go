package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
)

// reader reads back what writeFile wrote, as llama.cpp's gguf loader does.
type reader struct {
	b   []byte
	off int
}

func (r *reader) u32() uint32 { v := binary.LittleEndian.Uint32(r.b[r.off:]); r.off += 4; return v }
func (r *reader) u64() uint64 { v := binary.LittleEndian.Uint64(r.b[r.off:]); r.off += 8; return v }
func (r *reader) str() string {
	n := int(r.u64())
	s := string(r.b[r.off : r.off+n])
	r.off += n
	return s
}

func (r *reader) value(typ uint32) any {
	switch typ {
	case tUint32, tInt32:
		return r.u32()
	case tFloat32:
		return math.Float32frombits(r.u32())
	case tString:
		return r.str()
	case tArray:
		et, n := r.u32(), r.u64()
		out := make([]any, n)
		for i := range out {
			out[i] = r.value(et)
		}
		return out
	}
	panic(fmt.Sprintf("type %d", typ))
}

type info struct {
	dims []uint64
	typ  uint32
	off  uint64
}

func read(t *testing.T, path string) (map[string]any, map[string]info, []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := &reader{b: b}
	if r.u32() != 0x46554747 || r.u32() != Version {
		t.Fatal("not GGUF v3")
	}
	nt, nkv := r.u64(), r.u64()
	meta := map[string]any{}
	for range nkv {
		k := r.str()
		meta[k] = r.value(r.u32())
	}
	ts := map[string]info{}
	for range nt {
		name := r.str()
		var in info
		for range r.u32() {
			in.dims = append(in.dims, r.u64())
		}
		in.typ, in.off = r.u32(), r.u64()
		if in.off%alignment != 0 {
			t.Fatalf("%s at %d: not aligned", name, in.off)
		}
		ts[name] = in
	}
	return meta, ts, b[align(uint64(r.off)):]
}

// The file carries the shape, every tensor under llama.cpp's name with its
// dimensions innermost first, and each tensor's values: a Llama's query
// and key rows in llama.cpp's pair order, every other tensor as the
// folder has it; F16 and BF16 round each value to the nearest half.
func TestExport(t *testing.T) {
	for _, preset := range []string{"tiny", "tiny-qwen3", "small"} {
		dir := filepath.Join(t.TempDir(), preset)
		if err := model.Generate(preset, 3, dir, safetensors.F32); err != nil {
			t.Fatal(err)
		}
		w, err := model.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		c := w.Cfg
		for _, dt := range []uint32{F32, F16, BF16} {
			out := filepath.Join(t.TempDir(), "m.gguf")
			if err := Export(dir, dt, out); err != nil {
				t.Fatal(err)
			}
			meta, ts, data := read(t, out)
			arch := meta["general.architecture"]
			if arch != c.ModelType || meta[c.ModelType+".block_count"] != uint32(c.Layers) || meta[c.ModelType+".attention.head_count_kv"] != uint32(c.KVHeads) ||
				meta["tokenizer.ggml.model"] != "gpt2" || len(meta["tokenizer.ggml.tokens"].([]any)) != c.Vocab {
				t.Fatalf("%s: metadata %v", preset, meta["general.architecture"])
			}
			if (preset == "small") != (len(meta["tokenizer.ggml.merges"].([]any)) > 0) {
				t.Fatalf("%s: merges only from a tokenizer.json", preset)
			}
			// 2 + 9 a layer, + 2 a layer of Qwen3's head norms, + an untied head.
			want := 2 + c.Layers*9
			if c.QKNorm {
				want += 2 * c.Layers
			}
			if !c.TieEmbed {
				want++
			}
			if len(ts) != want {
				t.Fatalf("%s: %d tensors, want %d", preset, len(ts), want)
			}
			values := func(name string, n int) []float32 {
				in := ts[name]
				out := make([]float32, n)
				for i := range out {
					switch in.typ {
					case F16:
						out[i] = safetensors.F16ToF32(binary.LittleEndian.Uint16(data[in.off+uint64(2*i):]))
					case BF16:
						out[i] = safetensors.BF16ToF32(binary.LittleEndian.Uint16(data[in.off+uint64(2*i):]))
					default:
						out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[in.off+uint64(4*i):]))
					}
				}
				return out
			}
			rounded := func(v []float32) []float32 {
				out := make([]float32, len(v))
				for i, x := range v {
					switch dt {
					case F16:
						out[i] = safetensors.F16ToF32(safetensors.F32ToF16(x))
					case BF16:
						out[i] = safetensors.BF16ToF32(safetensors.F32ToBF16(x))
					default:
						out[i] = x
					}
				}
				return out
			}
			if in := ts["blk.1.ffn_down.weight"]; !slices.Equal(in.dims, []uint64{uint64(c.Intermediate), uint64(c.Hidden)}) || in.typ != dt {
				t.Fatalf("%s: ffn_down %+v", preset, in)
			}
			if ts["output_norm.weight"].typ != F32 || !slices.Equal(values("output_norm.weight", c.Hidden), w.Norm) {
				t.Fatalf("%s: output_norm", preset)
			}
			if !slices.Equal(values("blk.1.ffn_down.weight", len(w.Layers[1].Wd)), rounded(w.Layers[1].Wd)) {
				t.Fatalf("%s: ffn_down's values", preset)
			}
			q := values("blk.0.attn_q.weight", len(w.Layers[0].Wq))
			hd, D := c.HeadDim, c.Hidden
			for h := range c.Heads {
				for j := range hd / 2 {
					for k := range 2 {
						src := w.Layers[0].Wq[(h*hd+k*hd/2+j)*D : (h*hd+k*hd/2+j+1)*D]
						if c.ModelType != "llama" {
							src = w.Layers[0].Wq[(h*hd+2*j+k)*D : (h*hd+2*j+k+1)*D]
						}
						if !slices.Equal(q[(h*hd+2*j+k)*D:(h*hd+2*j+k+1)*D], rounded(src)) {
							t.Fatalf("%s: q row of head %d, pair %d, %d", preset, h, j, k)
						}
					}
				}
			}
		}
	}
}

// A model llama.cpp would run differently is refused, not exported wrong.
func TestExportRefuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if err := model.Generate("tiny-llama3", 1, dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	if err := Export(dir, F32, filepath.Join(t.TempDir(), "m.gguf")); err == nil {
		t.Fatal("rope scaling exported")
	}
}
