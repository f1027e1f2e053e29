package gemm

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/wts-project/wts/kernels/rng"
	"github.com/wts-project/wts/kernels/safetensors"
)

func TestPackedHalfMatchesRef(t *testing.T) {
	for _, typ := range []Half{BF16, F16} {
		t.Run(string(typ.DType()), func(t *testing.T) {
			forEachSet(t, halfKernelSets(), func(t *testing.T) { testPackedHalfMatchesRef(t, typ) })
		})
	}
}

// Products with 16-bit panels give Ref's on the rounded weights: through
// the one-row kernels (MulAll, m < 4, with a float32 LoRA term), the tiles
// (Mul), mc rows at a time past mc, from PackTHalf and PackNHalf, in a
// slab that they fill to the half.
func testPackedHalfMatchesRef(t *testing.T, typ Half) {
	rounded := func(w []float32) ([]uint16, []float32) {
		h := typ.Narrow(w)
		return h, safetensors.Decode(typ.DType(), safetensors.Encode(typ.DType(), w))
	}
	r := rng.New(10)
	shapes := [][3]int{{1, 37, 19}, {1, 700, 1030}, {2, 64, 300}, {3, 50, 257}, {4, 70, 300}, {7, 4000, 513},
		{16, 90, 520}, {96, 33, 64}, {200, 50, 600}}
	for _, s := range shapes {
		m, n, k := s[0], s[1], s[2]
		for _, ta := range []bool{false, true} {
			name := fmt.Sprintf("m=%d n=%d k=%d ta=%v", m, n, k, ta)
			lda := k + 1
			arows := m
			if ta {
				lda, arows = m+3, k
			}
			a, w := randSlice(r, arows*lda), randSlice(r, n*(k+2))
			ldc := n + 2
			c := randSlice(r, m*ldc)
			want := append([]float32(nil), c...)
			hw, back := rounded(w)
			Ref(ta, true, m, n, k, 0.5, a, lda, back, k+2, 1, want, ldc)
			wt := make([]float32, k*(n+1))
			for j := 0; j < n; j++ {
				for p := 0; p < k; p++ {
					wt[p*(n+1)+j] = w[j*(k+2)+p]
				}
			}
			slab := NewSlab(PackedLen(n, k)) // room for both at half the size
			hwt, _ := rounded(wt)
			for _, pk := range []*Packed{slab.PackTHalf(typ, hw, n, k, k+2), slab.PackNHalf(typ, hwt, k, n, n+1)} {
				got := append([]float32(nil), c...)
				pk.Mul(ta, m, 0.5, a, lda, 1, got, ldc)
				closeTo(t, name+" Mul", got, want, k)
				if ta {
					continue
				}
				// MulAll with a term: the one-row kernels below 4 rows.
				rank := 8
				u, tb := randSlice(r, m*rank), randSlice(r, n*rank)
				want2 := append([]float32(nil), want...)
				Ref(false, true, m, n, rank, 0.25, u, rank, tb, rank, 1, want2, ldc)
				got = append([]float32(nil), c...)
				MulAll([]Product{{B: pk, M: m, Alpha: 0.5, A: a, Lda: lda, Beta: 1, C: got, Ldc: ldc,
					Term: Term{B: PackT(tb, n, rank, rank), U: u, Ldu: rank, Alpha: 0.25}}})
				closeTo(t, name+" MulAll", got, want2, k)
			}
			if len(slab.rest) > 1 {
				t.Fatalf("%s: %d floats of the slab left", name, len(slab.rest))
			}
		}
	}
}

func closeTo(t *testing.T, what string, got, want []float32, k int) {
	t.Helper()
	for i := range want {
		if !(math.Abs(float64(got[i]-want[i])) <= 1e-5*float64(k+1)) {
			t.Fatalf("%s: [%d] %v, Ref %v", what, i, got[i], want[i])
		}
	}
}

// BenchmarkDecodeHalf is one decode step's products (m rows) over the
// small model's weights, packed in float32, bf16 and f16, through MulAll
// as the decoder runs them: the 16-bit types read half the bytes.
func BenchmarkDecodeHalf(b *testing.B) {
	r := rng.New(1)
	var shapes [][2]int
	for l := 0; l < 8; l++ {
		shapes = append(shapes, [][2]int{{512, 512}, {256, 512}, {256, 512}, {512, 512}, {1280, 512}, {1280, 512}, {512, 1280}}...)
	}
	shapes = append(shapes, [2]int{8192, 512})
	floats := 0
	for _, s := range shapes {
		floats += s[0] * s[1]
	}
	for _, typ := range []string{"f32", "bf16", "f16"} {
		slab := NewSlab(floats)
		var ws []*Packed
		for _, s := range shapes {
			w := randSlice(r, s[0]*s[1])
			switch typ {
			case "bf16":
				ws = append(ws, slab.PackTHalf(BF16, BF16.Narrow(w), s[0], s[1], s[1]))
			case "f16":
				ws = append(ws, slab.PackTHalf(F16, F16.Narrow(w), s[0], s[1], s[1]))
			default:
				ws = append(ws, slab.PackT(w, s[0], s[1], s[1]))
			}
		}
		bytes := 4 * floats
		if typ != "f32" {
			bytes /= 2
		}
		for _, m := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/m%d", typ, m), func(b *testing.B) {
				x, c := randSlice(r, m*8192), make([]float32, m*8192)
				b.SetBytes(int64(bytes))
				for i := 0; i < b.N; i++ {
					for _, w := range ws {
						MulAll([]Product{{B: w, M: m, Alpha: 1, A: x, Lda: w.K, C: c, Ldc: w.N}})
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
			})
		}
	}
}

// The 16-bit tile kernels, where this machine has them, give what the
// float32 tile kernel gives on the widened panel, bit for bit (the same
// products in the same order): A packed or in place, 4 to 6 rows, with and
// without a float32 second source, set or added.
func TestHalfTilesMatchWidened(t *testing.T) {
	forEachKernelSet(t, func(t *testing.T) {
		r := rng.New(12)
		for _, typ := range []Half{BF16, F16} {
			kern := typ.kernels()
			if !kern.direct() {
				t.Skipf("%s: no tile kernels of its own here", typ.DType())
			}
			for _, k := range []int{1, 3, 4, 5, 17, 256} {
				h := typ.Narrow(randSlice(r, k*nr))
				if typ == BF16 {
					for p := 0; p < k; p++ {
						pairBF16((*[nr]uint16)(h[p*nr:]))
					}
				}
				wide := make([]float32, k*nr)
				kern.widen(h, wide)
				lda := k + mr + 3
				a, u := randSlice(r, (k+mr)*lda), randSlice(r, mr*19)
				secs := []*second{nil, {a: u, rs: 19, cs: 1, b: randSlice(r, 16*nr), k: 16}}
				for _, st := range [][2]int{{1, mr}, {lda, 1}} {
					for _, rows := range []int{mr, 5, 4} {
						for _, set := range []bool{false, true} {
							for si, sec := range secs {
								c1 := randSlice(r, mr*20)
								c2 := slices.Clone(c1)
								kern.tile(rows, k, a, st[0], st[1], h, c1, 20, &wide[0], 0, 32, set, sec)
								tile(rows, k, a, st[0], st[1], wide, c2, 20, &wide[0], 0, 64, set, sec)
								if !slices.Equal(c1, c2) {
									t.Fatalf("%s rows=%d k=%d strides %v set %v second %d: %v, float32 tile %v", typ.DType(), rows, k, st, set, si, c1, c2)
								}
							}
						}
					}
				}
			}
		}
	})
}
