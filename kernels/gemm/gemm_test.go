package gemm

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"testing"
	"unsafe"

	"github.com/wts-project/wts/kernels/rng"
)

// kernelSet is one set of tile kernels (see kernelSets).
type kernelSet struct {
	name string
	use  func()
}

// forEachKernelSet runs fn as a subtest under each tile kernel set the
// machine has, so that one with AVX-512 proves the AVX2 tiles too.
func forEachKernelSet(t *testing.T, fn func(t *testing.T)) { forEachSet(t, kernelSets(), fn) }

func forEachSet(t *testing.T, sets []kernelSet, fn func(t *testing.T)) {
	defer restoreKernels()
	for _, s := range sets {
		s.use()
		t.Run(s.name, fn)
	}
}

func randSlice(r *rng.Source, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.Uniform(-1, 1))
	}
	return s
}

// checkAgainstRef runs Sgemm and Ref on the same random operands and compares
// with a tolerance scaled by k (float32 accumulation error grows with depth).
// C's rows are padC floats wider than n (0: C is one block).
func checkAgainstRef(t *testing.T, r *rng.Source, ta, tb bool, m, n, k int, alpha, beta float32, padC int) {
	t.Helper()
	lda, ldb, ldc := k+3, n+1, n+padC
	if ta {
		lda = m + 2
	}
	if tb {
		ldb = k + 7
	}
	arows, brows := m, k
	if ta {
		arows = k
	}
	if tb {
		brows = n
	}
	a := randSlice(r, arows*lda)
	b := randSlice(r, brows*ldb)
	c := randSlice(r, m*ldc)
	if beta == 0 { // C is not read: NaN there must not show
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				c[i*ldc+j] = float32(math.NaN())
			}
		}
	}
	want := append([]float32(nil), c...)
	Ref(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, want, ldc)
	Sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	tol := 1e-5 * float64(k+1)
	for i := 0; i < m; i++ {
		for j := 0; j < ldc; j++ {
			g, w := c[i*ldc+j], want[i*ldc+j]
			if j >= n { // padding columns must be untouched
				if g != w {
					t.Fatalf("wrote outside C at [%d,%d]", i, j)
				}
				continue
			}
			if !(math.Abs(float64(g-w)) <= tol) {
				t.Fatalf("ta=%v tb=%v m=%d n=%d k=%d: C[%d,%d]=%v want %v", ta, tb, m, n, k, i, j, g, w)
			}
		}
	}
}

func TestSgemmMatchesRef(t *testing.T) { forEachKernelSet(t, testSgemmMatchesRef) }

func testSgemmMatchesRef(t *testing.T) {
	r := rng.New(3)
	shapes := [][3]int{{1, 1, 1}, {1, 37, 19}, {3, 5, 300}, {6, 16, 4}, {7, 17, 5}, {13, 33, 257}, {96, 64, 256},
		{100, 50, 600}, {2, 300, 64}, {16, 300, 70}, {9, 200, 513}, {31, 1000, 40}, {3, 9, 17}, {1, 64, 300}, {5, 30, 7}, {512, 16, 512}, {100, 24, 700}, {13, 32, 5}, {37, 7, 300}, {8, 16, 0}, {31, 3100, 9}, {200, 7, 130},
		{2, 64, 80}, {4, 128, 33}, {1, 100, 5}, {16, 1280, 16}, {16, 16, 512}, {16, 70, 3}, {16, 8, 16}, {5, 8, 1}, {16, 4, 32}, {9, 96, 8}, {30, 40, 8}, {12, 33, 1},
		{390, 3090, 20}} // many row blocks, two column blocks
	for _, s := range shapes {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				checkAgainstRef(t, r, ta, tb, s[0], s[1], s[2], 1, 0, 5)
				checkAgainstRef(t, r, ta, tb, s[0], s[1], s[2], 1, 0, 0)
				checkAgainstRef(t, r, ta, tb, s[0], s[1], s[2], 0.5, 1, 5)
				checkAgainstRef(t, r, ta, tb, s[0], s[1], s[2], -2, 0.25, 0)
			}
		}
	}
}

// The assembly kernels are compared with their portable twins directly, so a
// machine without AVX2 still proves the Go versions and one with it proves both.
func TestKernelsMatchPortable(t *testing.T) { forEachKernelSet(t, testKernelsMatchPortable) }

func testKernelsMatchPortable(t *testing.T) {
	r := rng.New(5)
	for _, k := range []int{1, 3, 4, 5, 17, 256} {
		// A packed (rs 1, cs mr), rows in place (rs lda, cs 1) and columns
		// in place (rs 1, cs lda), with lda wider than the tile needs.
		lda := k + mr + 3
		a, b := randSlice(r, (k+mr)*lda), randSlice(r, k*nr)
		for _, st := range [][2]int{{1, mr}, {lda, 1}, {1, lda}} {
			// No second source; a LoRA term's u rows in place; one packed.
			u := randSlice(r, mr*19)
			secs := []*second{nil, {a: u, rs: 19, cs: 1, b: randSlice(r, 16*nr), k: 16}, {a: u, rs: 1, cs: mr, b: randSlice(r, 3*nr), k: 3}}
			for _, rows := range []int{mr, 5, 4} {
				for _, set := range []bool{false, true} {
					for si, sec := range secs {
						c1 := randSlice(r, mr*20)
						c2 := append([]float32(nil), c1...)
						tile(rows, k, a, st[0], st[1], b, c1, 20, &b[0], 0, 64, set, sec)
						tileGo(rows, k, a, st[0], st[1], b, c2, 20, set, sec)
						for i := range c1 {
							if math.Abs(float64(c1[i]-c2[i])) > 1e-4 {
								t.Fatalf("tile rows=%d k=%d strides %v set %v second %d [%d]: %v vs %v", rows, k, st, set, si, i, c1[i], c2[i])
							}
						}
					}
				}
			}
		}
	}
	for _, k := range []int{1, 7, 8, 9, 16, 31, 33, 100} {
		x, w := randSlice(r, k), randSlice(r, 4*(k+2))
		var o1, o2 [4]float32
		dot4(x, w, k+2, &o1)
		dot4Go(x, w, k+2, &o2)
		for i := range o1 {
			if math.Abs(float64(o1[i]-o2[i])) > 1e-4 {
				t.Fatalf("dot4 k=%d: %v vs %v", k, o1, o2)
			}
		}
		x1 := randSlice(r, k)
		for _, quads := range []int{1, 3} {
			ws := randSlice(r, 4*quads*(k+2))
			c0, c1 := randSlice(r, 4*quads), randSlice(r, 4*quads)
			g0, g1 := slices.Clone(c0), slices.Clone(c1)
			dots4x2(x, x1, ws, k+2, quads, 0.75, c0, c1)
			dots4x2Go(x, x1, ws, k+2, quads, 0.75, g0, g1)
			for i := range c0 {
				if math.Abs(float64(c0[i]-g0[i])) > 1e-4 || math.Abs(float64(c1[i]-g1[i])) > 1e-4 {
					t.Fatalf("dots4x2 k=%d quads=%d: %v %v vs %v %v", k, quads, c0, c1, g0, g1)
				}
			}
		}
		var g1, g2 [nr]float32
		panel := randSlice(r, k*nr)
		gemv16(x, panel, &g1)
		gemv16Go(x, panel, &g2)
		for i := range g1 {
			if math.Abs(float64(g1[i]-g2[i])) > 1e-4 {
				t.Fatalf("gemv16 k=%d: %v vs %v", k, g1, g2)
			}
		}
		var h1, h2 [4 * nr]float32
		panels := randSlice(r, 4*k*nr)
		gemv64(x, panels, &h1)
		gemv64Go(x, panels, &h2)
		for i := range h1 {
			if math.Abs(float64(h1[i]-h2[i])) > 1e-4 {
				t.Fatalf("gemv64 k=%d: %v vs %v", k, h1, h2)
			}
		}
		y1, y2 := randSlice(r, k), make([]float32, k)
		copy(y2, y1)
		Axpy(0.7, x, y1)
		axpyGo(0.7, x, y2)
		for i := range y1 {
			if math.Abs(float64(y1[i]-y2[i])) > 1e-5 {
				t.Fatalf("axpy k=%d", k)
			}
		}
		if d1, d2 := dot(x, w[:k]), dotGo(x, w[:k]); math.Abs(float64(d1-d2)) > 1e-4 {
			t.Fatalf("dot k=%d: %v vs %v", k, d1, d2)
		}
	}
}

// FuzzTermProduct holds a product carrying a LoRA term to Ref's two
// products, on every path: riding on the tiles (FusesTerm), after the
// region as a product of its own (gemv rows, rows that do not cut into
// tiles), and the prompt path (more than mc rows). C's padding columns must
// stay untouched, and with beta 0 a NaN in C must not show.
func FuzzTermProduct(f *testing.F) {
	f.Add(uint8(16), uint16(520), uint16(260), uint8(16), uint8(1), uint64(1))
	f.Add(uint8(7), uint16(33), uint16(17), uint8(4), uint8(2), uint64(2))
	f.Fuzz(func(t *testing.T, m uint8, n, k uint16, rank, mode uint8, seed uint64) {
		r := rng.New(seed)
		M, N, K, R := int(m)%120+1, int(n)%600+1, int(k)%600+1, int(rank)%40+1
		alpha, beta, talpha := []float32{1, 0.5}[mode%2], []float32{0, 1}[mode/2%2], []float32{1, -0.75}[mode/4%2]
		lda, ldu, ldc := K+1, R+3, N+2
		a, w, u, tb := randSlice(r, M*lda), randSlice(r, N*K), randSlice(r, M*ldu), randSlice(r, N*R)
		c := randSlice(r, M*ldc)
		if beta == 0 {
			for i := 0; i < M; i++ {
				for j := 0; j < N; j++ {
					c[i*ldc+j] = float32(math.NaN())
				}
			}
		}
		want := append([]float32(nil), c...)
		Ref(false, true, M, N, K, alpha, a, lda, w, K, beta, want, ldc)
		Ref(false, true, M, N, R, talpha, u, ldu, tb, R, 1, want, ldc)
		MulAll([]Product{{B: PackT(w, N, K, K), M: M, Alpha: alpha, A: a, Lda: lda, Beta: beta, C: c, Ldc: ldc,
			Term: Term{B: PackT(tb, N, R, R), U: u, Ldu: ldu, Alpha: talpha}}})
		tol := 1e-5 * float64(K+R+1)
		for i := 0; i < M; i++ {
			for j := 0; j < ldc; j++ {
				g, e := c[i*ldc+j], want[i*ldc+j]
				if j >= N {
					if g != e {
						t.Fatalf("wrote outside C at [%d,%d]", i, j)
					}
					continue
				}
				if !(math.Abs(float64(g-e)) <= tol) {
					t.Fatalf("m=%d n=%d k=%d r=%d mode %d (fused %v): C[%d,%d]=%v want %v", M, N, K, R, mode, FusesTerm(M, R), i, j, g, e)
				}
			}
		}
	})
}

func FuzzSgemm(f *testing.F) {
	f.Add(uint8(5), uint8(9), uint8(7), false, true, uint64(1))
	f.Fuzz(func(t *testing.T, m, n, k uint8, ta, tb bool, seed uint64) {
		checkAgainstRef(t, rng.New(seed), ta, tb, int(m%70), int(n%70), int(k)+int(m%3)*100, 1, 0.5, int(n%2)*5)
	})
}

// BenchmarkSgemm reports GFLOP/s on the shapes of the small and Qwen3-0.6B
// models' projections (tokens × in → out).
func BenchmarkSgemm(b *testing.B) {
	for _, s := range [][3]int{{512, 512, 512}, {512, 1280, 512}, {512, 1024, 1024}, {512, 3072, 1024}, {512, 1024, 3072}, {1024, 1024, 1024}} {
		m, n, k := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("%dx%dx%d", m, n, k), func(b *testing.B) { benchProduct(b, m, n, k) })
	}
}

// benchProduct times C = X·Wᵀ for X [m, k] and W [n, k], in GFLOP/s.
func benchProduct(b *testing.B, m, n, k int) {
	r := rng.New(1)
	x, w, c := randSlice(r, m*k), randSlice(r, n*k), make([]float32, m*n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Sgemm(false, true, m, n, k, 1, x, k, w, k, 0, c, n)
	}
	b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkGemv is the decode-time product: one token against a weight.
func BenchmarkGemv(b *testing.B) {
	for _, s := range [][2]int{{1024, 1024}, {3072, 1024}, {8192, 2048}} {
		n, k := s[0], s[1]
		b.Run(fmt.Sprintf("%dx%d", n, k), func(b *testing.B) {
			r := rng.New(1)
			x, w, c := randSlice(r, k), randSlice(r, n*k), make([]float32, n)
			b.SetBytes(int64(4 * n * k))
			for i := 0; i < b.N; i++ {
				Sgemm(false, true, 1, n, k, 1, x, k, w, k, 0, c, n)
			}
		})
	}
}

// BenchmarkGemvCold streams a model-sized set of [n,k] weights (far larger
// than the caches) one GEMV each, as a decode step does.
func BenchmarkGemvCold(b *testing.B) {
	for _, s := range [][2]int{{512, 512}, {1280, 512}, {8192, 512}, {1024, 1024}, {3072, 1024}} {
		n, k := s[0], s[1]
		b.Run(fmt.Sprintf("%dx%d", n, k), func(b *testing.B) {
			count := (256 << 20) / (4 * n * k)
			r := rng.New(1)
			ws := make([][]float32, count)
			for i := range ws {
				ws[i] = randSlice(r, n*k)
			}
			x, c := randSlice(r, k), make([]float32, n)
			b.SetBytes(int64(4 * n * k * count))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, w := range ws {
					Sgemm(false, true, 1, n, k, 1, x, k, w, k, 0, c, n)
				}
			}
		})
	}
}

// BenchmarkKernel runs each tile kernel of each set on data in L1, one per
// core (-cpu 1,2): the ceiling the packed GEMM can approach, and the rate
// per row that choosing tile heights weighs.
func BenchmarkKernel(b *testing.B) {
	const k = 256
	defer restoreKernels()
	for _, set := range kernelSets() {
		set.use()
		for _, rows := range []int{4, 5, mr} {
			b.Run(fmt.Sprintf("%s/rows%d", set.name, rows), func(b *testing.B) {
				b.RunParallel(func(pb *testing.PB) {
					r := rng.New(1)
					a, bp, c := randSlice(r, k*mr), randSlice(r, k*nr), make([]float32, mr*nr)
					for pb.Next() {
						tile(rows, k, a, 1, mr, bp, c, nr, &bp[0], 0, 64, false, nil)
					}
				})
				b.ReportMetric(2*float64(rows*nr*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkModelReplay is a decode step's products on the small preset's
// shapes (8 layers of q, k, v, o, gate, up, down, then the LM head), packed
// into one slab as the model holds them and read cold: m rows, one per
// sequence. Read it beside BenchmarkStream in the same run. hot16 is 16
// rows against one of those weights (512×512, 1 MB) again and again, so that
// it stays in L2: m16 over hot16 is what streaming the weights costs the
// tiles, the rest of their distance from BenchmarkKernel is theirs.
func BenchmarkModelReplay(b *testing.B) {
	r := rng.New(1)
	var ws []*Packed
	var floats int
	var shapes [][2]int
	for l := 0; l < 8; l++ {
		shapes = append(shapes, [][2]int{{512, 512}, {256, 512}, {256, 512}, {512, 512}, {1280, 512}, {1280, 512}, {512, 1280}}...)
	}
	shapes = append(shapes, [2]int{8192, 512})
	for _, s := range shapes {
		floats += s[0] * s[1]
	}
	slab := NewSlab(floats) // in huge pages, as transformer.New packs them
	for _, s := range shapes {
		n, k := s[0], s[1]
		ws = append(ws, slab.PackT(randSlice(r, n*k), n, k, k))
	}
	for _, m := range []int{1, 8, 16} {
		b.Run(fmt.Sprintf("m%d", m), func(b *testing.B) {
			x, c := randSlice(r, m*8192), make([]float32, m*8192)
			b.SetBytes(int64(4 * floats))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, w := range ws {
					w.Mul(false, m, 1, x, w.K, 0, c, w.N)
				}
			}
			b.ReportMetric(2*float64(m*floats)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
	b.Run("hot16", func(b *testing.B) {
		w := ws[0]
		x, c := randSlice(r, 16*w.K), make([]float32, 16*w.N)
		for i := 0; i < b.N; i++ {
			w.Mul(false, 16, 1, x, w.K, 0, c, w.N)
		}
		b.ReportMetric(2*float64(16*w.N*w.K)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}

// BenchmarkStream reads 256 MB in one parallel region through the
// row-major gemv: the read bandwidth single-stream decode is judged by.
func BenchmarkStream(b *testing.B) {
	buf := HugeFloats(256 << 20 / 4)
	for i := range buf {
		buf[i] = 1
	}
	x := make([]float32, 4096)
	out := make([]float32, len(buf)/len(x))
	b.SetBytes(int64(len(buf) * 4))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Sgemm(false, true, 1, len(out), len(x), 1, x, len(x), buf, len(x), 0, out, len(out))
	}
}

// A prepacked weight gives what Sgemm gives with the same weight transposed.
func TestPackedMatchesRef(t *testing.T) { forEachKernelSet(t, testPackedMatchesRef) }

func testPackedMatchesRef(t *testing.T) {
	r := rng.New(8)
	// Row counts cover the one-row kernels (m < 4), the few-rows path with
	// whole tiles read in place (4, 10, 16, 96) and a packed tail (5, 7,
	// 17), and the blocked path (100, 200); alpha 1 reads A in place, other
	// alphas a scaled copy; beta 0 writes over C (NaN there) without reading it.
	shapes := [][3]int{{1, 37, 19}, {1, 700, 1030}, {3, 50, 257}, {4, 70, 300}, {5, 16, 300}, {10, 40, 260},
		{16, 3100, 70}, {17, 90, 520}, {8, 40, 300}, {13, 50, 260}, {14, 33, 520}, {96, 33, 64}, {100, 50, 600}, {7, 4000, 513}, {200, 33, 9}}
	for _, s := range shapes {
		m, n, k := s[0], s[1], s[2]
		for _, ta := range []bool{false, true} {
			for _, ab := range [][2]float32{{1, 1}, {0.5, 1}, {1, 0}, {0.5, 0}} {
				alpha, beta := ab[0], ab[1]
				lda := k + 1
				if ta {
					lda = m + 3
				}
				arows := m
				if ta {
					arows = k
				}
				a, w := randSlice(r, arows*lda), randSlice(r, n*(k+2))
				ldc := n + 2
				c := randSlice(r, m*ldc)
				if beta == 0 { // C is not read: NaN there must not show
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							c[i*ldc+j] = float32(math.NaN())
						}
					}
				}
				c2 := append([]float32(nil), c...)
				want := append([]float32(nil), c...)
				Ref(ta, true, m, n, k, alpha, a, lda, w, k+2, beta, want, ldc)
				// Both packs from one slab sized by PackedLen, which they
				// must fill exactly.
				slab := NewSlab(2 * PackedLen(n, k))
				slab.PackT(w, n, k, k+2).Mul(ta, m, alpha, a, lda, beta, c, ldc)
				// The same product from B = Wᵀ stored as a [k, n] matrix.
				wt := make([]float32, k*(n+1))
				for j := 0; j < n; j++ {
					for p := 0; p < k; p++ {
						wt[p*(n+1)+j] = w[j*(k+2)+p]
					}
				}
				slab.PackN(wt, k, n, n+1).Mul(ta, m, alpha, a, lda, beta, c2, ldc)
				if len(slab.rest) != 0 {
					t.Fatalf("n=%d k=%d: %d floats of the slab left", n, k, len(slab.rest))
				}
				for i := range c {
					if !(math.Abs(float64(c[i]-want[i])) <= 1e-5*float64(k+1)) || !(math.Abs(float64(c2[i]-want[i])) <= 1e-5*float64(k+1)) {
						t.Fatalf("m=%d n=%d k=%d ta=%v alpha=%v beta=%v: [%d] %v / %v vs %v", m, n, k, ta, alpha, beta, i, c[i], c2[i], want[i])
					}
				}
			}
		}
	}
}

// HugeFloats gives exactly n zeroed floats, on a huge-page boundary when
// they span one.
func TestHugeFloats(t *testing.T) {
	for _, n := range []int{10, hugePage/4 - 1, hugePage / 4, 3*hugePage/4 + 5} {
		x := HugeFloats(n)
		if len(x) != n || cap(x) != n {
			t.Fatalf("n=%d: len %d cap %d", n, len(x), cap(x))
		}
		if addr := uintptr(unsafe.Pointer(&x[0])); n*4 >= hugePage && addr%hugePage != 0 {
			t.Fatalf("n=%d: starts at %#x, not on a %d-byte boundary", n, addr, hugePage)
		}
		for i, v := range x {
			if v != 0 {
				t.Fatalf("n=%d: [%d] = %v", n, i, v)
			}
		}
	}
}

// MulAll's products, run in one region with the workers claiming their
// panels, give what Ref gives for each: sets that mix one-row and tile
// products, panel counts that do not split evenly into gemv's groups of
// four, alpha and beta other than 1 and 0, and a set with a prompt's rows
// (run one by one); also with several callers running their sets at once
// on the shared workers, as the training and sampling executors do.
func TestMulAllMatchesRef(t *testing.T) { forEachKernelSet(t, testMulAllMatchesRef) }

func testMulAllMatchesRef(t *testing.T) {
	r := rng.New(9)
	sets := [][][3]int{ // per product: m, n, k (one k per set: they read one input)
		{{1, 512, 300}, {1, 256, 300}, {1, 16, 300}, {1, 17, 300}},
		{{16, 520, 260}, {16, 16, 260}, {3, 16, 260}, {5, 100, 260}, {16, 40, 260}},
		{{8, 300, 512}, {10, 17, 512}, {7, 64, 512}},
		{{2, 33, 16}, {16, 70, 16}},
		{{120, 40, 64}, {4, 40, 64}},
	}
	type product struct {
		p       Product
		c, want []float32 // C before, and Ref's C after
	}
	var cases [][]product
	for _, set := range sets {
		var ps []product
		for pi, sh := range set {
			m, n, k := sh[0], sh[1], sh[2]
			alpha, beta := float32(1), float32(0)
			if pi%2 == 1 {
				alpha, beta = 0.5, 1
			}
			a, w := randSlice(r, m*(k+1)), randSlice(r, n*k)
			c := randSlice(r, m*(n+3))
			exp := append([]float32(nil), c...)
			Ref(false, true, m, n, k, alpha, a, k+1, w, k, beta, exp, n+3)
			pr := Product{B: PackT(w, n, k, k), M: m, Alpha: alpha, A: a, Lda: k + 1, Beta: beta, Ldc: n + 3}
			if pi%2 == 0 { // a LoRA term: on the tiles where FusesTerm, alone elsewhere
				rank, talpha := 4+12*(pi/2%2), float32(0.25)
				u, tb := randSlice(r, m*(rank+2)), randSlice(r, n*rank)
				Ref(false, true, m, n, rank, talpha, u, rank+2, tb, rank, 1, exp, n+3)
				pr.Term = Term{B: PackT(tb, n, rank, rank), U: u, Ldu: rank + 2, Alpha: talpha}
			}
			ps = append(ps, product{pr, c, exp})
		}
		cases = append(cases, ps)
	}
	run := func(si int) error {
		var ps []Product
		for _, pr := range cases[si] {
			pr.p.C = append([]float32(nil), pr.c...)
			ps = append(ps, pr.p)
		}
		MulAll(ps)
		for pi, pr := range ps {
			for i, want := range cases[si][pi].want {
				if math.Abs(float64(pr.C[i]-want)) > 1e-5*float64(pr.B.K+1) {
					return fmt.Errorf("set %d product %d: [%d] %v vs %v", si, pi, i, pr.C[i], want)
				}
			}
		}
		return nil
	}
	serialThenShared(t, len(cases), 20, run)
}

// serialThenShared runs cases 0..n-1 through run one by one, then from four
// callers at once for rounds rounds, each starting at another case, so that
// the products share the workers in every mix.
func serialThenShared(t *testing.T, n, rounds int, run func(int) error) {
	t.Helper()
	for i := range n {
		if err := run(i); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				for i := range n {
					if err := run((i + g) % n); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// MulAllAfter's terms read what its pre products write (LoRA's u = x·Aᵀ,
// then y = x·Wᵀ + s·u·Bᵀ): every path (terms on the tiles, on gemv rows
// after the region, the prompt path) matches Ref, also from four callers at
// once on the shared workers, where a term read before its pre was done
// would show.
func TestMulAllAfterMatchesRef(t *testing.T) { forEachKernelSet(t, testMulAllAfterMatchesRef) }

func testMulAllAfterMatchesRef(t *testing.T) {
	r := rng.New(13)
	type lora struct {
		pre, p     Product
		want       []float32
		u, c, init []float32
	}
	var cases []lora
	for _, m := range []int{16, 8, 5, 7, 1, 120} {
		// pre is deep and the products one k block, so that the helpers
		// reach the terms long before pre is done.
		const n, k, kpre, rank = 300, 200, 6000, 16
		x, xp, a := randSlice(r, m*k), randSlice(r, m*kpre), randSlice(r, rank*kpre)
		w, b := randSlice(r, n*k), randSlice(r, n*rank)
		u, want := make([]float32, m*rank), randSlice(r, m*n)
		init := slices.Clone(want)
		Ref(false, true, m, rank, kpre, 1, xp, kpre, a, kpre, 0, u, rank)
		Ref(false, true, m, n, k, 1, x, k, w, k, 0.5, want, n)
		Ref(false, true, m, n, rank, 0.25, u, rank, b, rank, 1, want, n)
		cases = append(cases, lora{
			pre:  Product{B: PackT(a, rank, kpre, kpre), M: m, Alpha: 1, A: xp, Lda: kpre, Ldc: rank},
			p:    Product{B: PackT(w, n, k, k), M: m, Alpha: 1, A: x, Lda: k, Beta: 0.5, Ldc: n, Term: Term{B: PackT(b, n, rank, rank), Ldu: rank, Alpha: 0.25}},
			want: want, u: u, init: init,
		})
	}
	run := func(ci int) error {
		lc := cases[ci]
		pre, p := lc.pre, lc.p
		pre.C = make([]float32, len(lc.u))
		for i := range pre.C {
			pre.C[i] = float32(math.NaN()) // beta 0: never read; a term reading it early shows
		}
		p.C, p.Term.U = slices.Clone(lc.init), pre.C
		MulAllAfter([]Product{pre}, []Product{p})
		for i, want := range lc.want {
			if !(math.Abs(float64(p.C[i]-want)) <= 1e-4*(1+math.Abs(float64(want)))) {
				return fmt.Errorf("m=%d (fused %v): [%d] %v vs %v", p.M, FusesTerm(p.M, 16), i, p.C[i], want)
			}
		}
		return nil
	}
	serialThenShared(t, len(cases), 10, run)
}

// Workers claiming a region's panels at once take every panel exactly once,
// in order, in claims of at least the grain (the last may be short) that
// shrink as the region runs out; and the panel a claim prefetches after it
// is the first of the plan it falls in.
func TestFewJobClaims(t *testing.T) {
	plan := func(m, n, k int) rowsPlan {
		p := PackT(make([]float32, n*k), n, k, k)
		return rowsPlan{p: p, m: m, panels: (n + nr - 1) / nr}
	}
	for _, c := range []struct {
		grain, slots int
		plans        []rowsPlan
	}{
		{4, 2, []rowsPlan{plan(1, 512, 512), plan(1, 16, 512), plan(1, 256, 512), plan(1, 16, 512), plan(1, 250, 300)}},
		{1, 2, []rowsPlan{plan(16, 8192, 512)}},
		{1, 3, []rowsPlan{plan(16, 16, 512), plan(16, 32, 1280), plan(16, 1280, 16)}},
	} {
		j := &fewJob{plans: c.plans, slots: c.slots, grain: c.grain, first: []int{0}}
		for i := range c.plans {
			j.first = append(j.first, j.first[i]+c.plans[i].panels)
		}
		total := j.first[len(c.plans)]
		for q := 0; q < total; q++ {
			i := sort.SearchInts(j.first, q+1) - 1
			p := c.plans[i].p
			if want := &p.data[(q-j.first[i])*nr*min(kc, p.K)]; j.panelData(q) != want {
				t.Fatalf("panel %d: data not that of plan %d's panel %d", q, i, q-j.first[i])
			}
		}
		if j.panelData(total) != nil {
			t.Fatal("a panel past the last")
		}
		claims := make([][][2]int, 4)
		var wg sync.WaitGroup
		for w := range claims {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for lo, hi := j.claim(); lo < hi; lo, hi = j.claim() {
					claims[w] = append(claims[w], [2]int{lo, hi})
				}
			}()
		}
		wg.Wait()
		var all [][2]int
		for _, cs := range claims {
			all = append(all, cs...)
		}
		slices.SortFunc(all, func(a, b [2]int) int { return a[0] - b[0] })
		at := 0
		for i, r := range all {
			if r[0] != at || r[1] <= r[0] || (r[1]-r[0] < c.grain && r[1] != total) {
				t.Fatalf("claim %d of %v: %v after panel %d", i, all, r, at)
			}
			if i > 0 && r[1]-r[0] > all[i-1][1]-all[i-1][0] {
				t.Fatalf("claims grew: %v then %v", all[i-1], r)
			}
			at = r[1]
		}
		if at != total {
			t.Fatalf("claims end at %d of %d", at, total)
		}
	}
}

// BenchmarkPackedCold is a decode step's products: m rows (one per sequence)
// against a model-sized set of packed [n,k] weights, far larger than the
// caches, so each weight streams from memory once per pass.
func BenchmarkPackedCold(b *testing.B) {
	for _, m := range []int{1, 8, 16} {
		for _, s := range [][2]int{{512, 512}, {1280, 512}, {512, 1280}, {3072, 1024}, {1024, 3072}} {
			n, k := s[0], s[1]
			b.Run(fmt.Sprintf("m%d/%dx%d", m, n, k), func(b *testing.B) {
				count := (256 << 20) / (4 * n * k)
				r := rng.New(1)
				ws := make([]*Packed, count)
				for i := range ws {
					ws[i] = PackT(randSlice(r, n*k), n, k, k)
				}
				x, c := randSlice(r, m*k), make([]float32, m*n)
				b.SetBytes(int64(4 * n * k * count))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for _, w := range ws {
						w.Mul(false, m, 1, x, k, 0, c, n)
					}
				}
				b.ReportMetric(2*float64(m*n*k*count)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkFewRows is batched decoding's LoRA products: 16 rows through a
// rank-16 pair, x·Aᵀ (n = r) and then u·Bᵀ (k = r).
func BenchmarkFewRows(b *testing.B) {
	for _, s := range [][3]int{{16, 16, 512}, {16, 1280, 16}, {16, 16, 1024}, {16, 3072, 16}} {
		m, n, k := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("%dx%dx%d", m, n, k), func(b *testing.B) { benchProduct(b, m, n, k) })
	}
}

// A row of Packed.Mul's C must not depend on how many rows the product has
// (training shares one product among several runs' rows and promises each
// run the sums of a pass of its own): every m from one row up, on either
// side of the few-rows and blocked paths, against the rows of a tall product.
func TestPackedMulRowsIndependentOfM(t *testing.T) {
	forEachKernelSet(t, testPackedMulRowsIndependentOfM)
}

func testPackedMulRowsIndependentOfM(t *testing.T) {
	r := rng.New(11)
	for _, sh := range [][2]int{{32, 96}, {300, 70}, {512, 1280}} {
		k, n := sh[0], sh[1]
		p := PackT(randSlice(r, n*k), n, k, k)
		const tall = 200
		a := randSlice(r, tall*k)
		full := make([]float32, tall*n)
		p.Mul(false, tall, 1, a, k, 0, full, n)
		for _, m := range []int{1, 2, 3, 4, 5, 6, 7, 13, 96, 97, 150} {
			for _, lo := range []int{0, 1, tall - m} {
				part := make([]float32, m*n)
				p.Mul(false, m, 1, a[lo*k:], k, 0, part, n)
				for i := range part {
					if math.Float32bits(part[i]) != math.Float32bits(full[lo*n+i]) {
						t.Fatalf("k %d n %d: rows %d..%d alone differ at %d: %v, in %d rows %v", k, n, lo, lo+m, i, part[i], tall, full[lo*n+i])
					}
				}
			}
		}
	}
}
