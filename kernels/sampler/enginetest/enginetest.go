// Package enginetest holds what every sampler.Engine must do, as a test
// any engine's package runs on its own engine: the CPU engine's in package
// sampler, a device engine's beside its kernels.
package enginetest

import (
	"math"
	"sync"
	"testing"

	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/sampler"
)

// Check holds e to the Engine contract, with ad as the LoRA adapter and
// tol the largest difference allowed between two logits that the contract
// says are the same (a device's kernels may sum in another order):
//
//   - a prefill hands back every position where asked, else the last;
//   - prompts prefilled together give what each gives alone, under its
//     own adapter or none;
//   - position t of a prompt gives what the prompt cut after t gives;
//   - a step on forks of a prompt's cache, rows of several adapters in one
//     pass, gives what a prefill of the prompt and the row's token gives.
func Check(t *testing.T, e sampler.Engine, ad *lora.Adapter[float32], tol float64) {
	t.Helper()
	z := e.Freeze(ad)
	V := e.Config().Vocab
	prompts := [][]int{{3, 4, 5, 6, 7}, {9}, {2, 8, 1}}
	zs := []sampler.Adapter{z, nil, z}
	all := []bool{true, false, true}
	caches := []sampler.Cache{e.NewCache(), e.NewCache(), e.NewCache()}
	got := prefill(t, e, zs, caches, prompts, all)
	for i, p := range prompts {
		for pos := range p {
			if row := got[i][pos]; (row != nil) != (all[i] || pos == len(p)-1) {
				t.Fatalf("prompt %d position %d: handed back %v, asked for %v", i, pos, row != nil, all[i])
			}
		}
		alone := prefill(t, e, zs[i:i+1], []sampler.Cache{e.NewCache()}, [][]int{p}, []bool{true})[0]
		for pos, row := range got[i] {
			if row != nil {
				same(t, "prompt prefilled with others, alone", row, alone[pos], tol)
			}
			cut := prefill(t, e, zs[i:i+1], []sampler.Cache{e.NewCache()}, [][]int{p[:pos+1]}, []bool{false})[0]
			same(t, "a prompt's position, the prompt cut after it", alone[pos], cut[pos], tol)
		}
	}
	// Two forks of prompt 0's cache and one of prompt 1's, stepped
	// together: the first under the adapter, the others as their prompts.
	forks := []sampler.Cache{caches[0].Fork(), caches[0].Fork(), caches[1].Fork()}
	for _, c := range forks {
		c.Reserve(4)
	}
	tokens := []int{11 % V, 12 % V, 13 % V}
	stepZ := []sampler.Adapter{z, z, nil}
	rows := make([][]float32, len(tokens))
	var mu sync.Mutex
	if err := e.Step(stepZ, forks, tokens, func(b int, logits []float32) {
		mu.Lock()
		defer mu.Unlock()
		if rows[b] != nil {
			t.Errorf("step row %d handed back twice", b)
		}
		rows[b] = append([]float32(nil), logits...)
	}); err != nil {
		t.Fatal(err)
	}
	from := []int{0, 0, 1}
	for b, tok := range tokens {
		p := append(append([]int(nil), prompts[from[b]]...), tok)
		want := prefill(t, e, stepZ[b:b+1], []sampler.Cache{e.NewCache()}, [][]int{p}, []bool{false})[0][len(p)-1]
		if len(rows[b]) != V {
			t.Fatalf("step row %d: %d logits, vocabulary %d", b, len(rows[b]), V)
		}
		same(t, "a step, the prefill of its sequence", rows[b], want, tol)
	}
}

// prefill runs e.Prefill and returns each prompt's rows by position (nil
// where none came back), each row checked to be the vocabulary's width.
func prefill(t *testing.T, e sampler.Engine, zs []sampler.Adapter, caches []sampler.Cache, prompts [][]int, all []bool) [][][]float32 {
	t.Helper()
	out := make([][][]float32, len(prompts))
	for i, p := range prompts {
		out[i] = make([][]float32, len(p))
	}
	var mu sync.Mutex
	var bad bool
	err := e.Prefill(zs, caches, prompts, all, func(i, pos int, logits []float32) {
		mu.Lock()
		defer mu.Unlock()
		if out[i][pos] != nil || len(logits) != e.Config().Vocab {
			bad = true
		}
		out[i][pos] = append([]float32(nil), logits...)
	})
	if err != nil {
		t.Fatal(err)
	}
	if bad {
		t.Fatal("a prefill row came back twice, or not the vocabulary's width")
	}
	return out
}

func same(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	for j := range want {
		if d := math.Abs(float64(got[j] - want[j])); !(d <= tol) {
			t.Fatalf("%s: logit %d is %v, want %v", what, j, got[j], want[j])
		}
	}
}
