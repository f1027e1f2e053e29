package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/wts-project/wts/kernels/kerr"
)

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.safetensors")
	vals := []float32{0, 1, -2.5, 3.14159, 1e-3, -65504, 1.0 / 3}
	in := []Tensor{
		{Name: "b", DType: F32, Shape: []int{7}, Data: vals},
		{Name: "a", DType: BF16, Shape: []int{7, 1}, Data: vals},
		{Name: "c", DType: F16, Shape: []int{1, 7}, Data: vals},
	}
	if err := Write(p, in, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata["format"] != "pt" {
		t.Fatalf("metadata %v", f.Metadata)
	}
	for _, want := range in {
		got, shape, err := f.Float32(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		if len(shape) != len(want.Shape) {
			t.Fatalf("%s shape %v", want.Name, shape)
		}
		for i, v := range vals {
			tol := map[DType]float64{F32: 0, BF16: 1.0 / 128, F16: 1.0 / 1024}[want.DType]
			if d := math.Abs(float64(got[i] - v)); d > tol*math.Abs(float64(v))+1e-7 {
				t.Fatalf("%s[%d] = %v want %v", want.Name, i, got[i], v)
			}
		}
	}
	if _, _, err := f.Float32("missing"); err == nil {
		t.Fatal("missing tensor read without error")
	}
}

// Tensors larger than one read chunk come back whole, as float32 and as
// either 16-bit type: a tensor of that type's stored values, any other's
// rounded from what Float32 reads.
func TestReadNarrow(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.safetensors")
	vals := make([]float32, readChunk/4*3+5) // three chunks and a piece, even as F32
	for i := range vals {
		vals[i] = float32(math.Sin(float64(i))) * float32(1+i%7)
	}
	in := []Tensor{
		{Name: "f32", DType: F32, Shape: []int{len(vals)}, Data: vals},
		{Name: "bf16", DType: BF16, Shape: []int{len(vals)}, Data: vals},
		{Name: "f16", DType: F16, Shape: []int{len(vals)}, Data: vals},
	}
	if err := Write(p, in, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tt := range in {
		wide, _, err := f.Float32(tt.Name)
		if err != nil {
			t.Fatal(err)
		}
		if want := Decode(tt.DType, Encode(tt.DType, vals)); !slices.Equal(wide, want) {
			t.Fatalf("%s: Float32 differs from the stored values", tt.Name)
		}
		for _, d := range []DType{BF16, F16} {
			half, shape, err := f.Narrow(tt.Name, d)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(shape, tt.Shape) || !slices.Equal(half, ToHalf(d, wide)) {
				t.Fatalf("%s as %s: not the stored values rounded (shape %v)", tt.Name, d, shape)
			}
		}
	}
	if _, _, err := f.Narrow("missing", BF16); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing tensor: %v", err)
	}
	if _, _, err := f.Narrow("f32", F32); err == nil {
		t.Fatal("F32 taken for a 16-bit type")
	}
}

func TestWriteDeterministic(t *testing.T) {
	dir := t.TempDir()
	ts := []Tensor{{Name: "x", DType: F32, Shape: []int{2}, Data: []float32{1, 2}}, {Name: "w", DType: BF16, Shape: []int{1}, Data: []float32{3}}}
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := Write(a, ts, nil); err != nil {
		t.Fatal(err)
	}
	ts[0], ts[1] = ts[1], ts[0]
	if err := Write(b, ts, nil); err != nil {
		t.Fatal(err)
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Fatal("same tensors in another order gave different bytes")
	}
	if binary.LittleEndian.Uint64(da)%8 != 0 {
		t.Fatal("header not padded to 8 bytes")
	}
}

// Every half and bfloat16 bit pattern must survive widen-then-narrow exactly.
func TestHalfExhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		back := F32ToF16(f)
		if f != f { // NaN: only NaN-ness must survive
			if F16ToF32(back) == F16ToF32(back) {
				t.Fatalf("f16 NaN %#x lost", h)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("f16 %#x -> %v -> %#x", h, f, back)
		}
		bf := BF16ToF32(uint16(h))
		if bf == bf && F32ToBF16(bf) != uint16(h) {
			t.Fatalf("bf16 %#x -> %v -> %#x", h, bf, F32ToBF16(bf))
		}
	}
}

func TestRoundingNearestEven(t *testing.T) {
	// 1 + 2^-8 lies halfway between two bf16 values; even mantissa wins (1.0).
	if got := BF16ToF32(F32ToBF16(1 + 1.0/256)); got != 1 {
		t.Fatalf("bf16 tie rounded to %v", got)
	}
	if got := F16ToF32(F32ToF16(1 + 1.0/2048)); got != 1 {
		t.Fatalf("f16 tie rounded to %v", got)
	}
	if got := F16ToF32(F32ToF16(1e6)); !math.IsInf(float64(got), 1) {
		t.Fatalf("f16 overflow gave %v", got)
	}
}

func TestCorruptHeaders(t *testing.T) {
	dir := t.TempDir()
	cases := map[string][]byte{
		"short":      {1, 2, 3},
		"hugelen":    append(binary.LittleEndian.AppendUint64(nil, 1<<40), '{', '}'),
		"notjson":    append(binary.LittleEndian.AppendUint64(nil, 2), 'x', 'y'),
		"badrange":   withHeader(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}}`, 8),
		"baddtype":   withHeader(`{"t":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}`, 8),
		"shapeslack": withHeader(`{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}}`, 8),
	}
	for name, data := range cases {
		p := filepath.Join(dir, name)
		os.WriteFile(p, data, 0o644)
		if f, err := Open(p); err == nil {
			f.Close()
			t.Errorf("%s: opened without error", name)
		}
	}
}

func withHeader(js string, dataBytes int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	b = append(b, js...)
	return append(b, make([]byte, dataBytes)...)
}

func FuzzOpen(f *testing.F) {
	f.Add(withHeader(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8))
	f.Add(withHeader(`{"__metadata__":{"a":"b"}}`, 0))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "fuzz")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Skip()
		}
		sf, err := Open(p)
		if err != nil {
			return
		}
		defer sf.Close()
		for name := range sf.Tensors {
			if _, _, err := sf.Float32(name); err != nil {
				t.Fatalf("validated tensor %q unreadable: %v", name, err)
			}
		}
	})
}

// A tensor holding NaN or an infinity is refused, and no file is left.
func TestWriteRefusesNonFinite(t *testing.T) {
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		path := filepath.Join(t.TempDir(), "w.safetensors")
		err := Write(path, []Tensor{{Name: "w", DType: F32, Shape: []int{2}, Data: []float32{1, v}}}, nil)
		if !errors.Is(err, kerr.ErrNonFinite) {
			t.Fatalf("%v: err %v", v, err)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("%v: a file was left: %v", v, err)
		}
	}
}
