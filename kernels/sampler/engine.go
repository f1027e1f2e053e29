package sampler

import (
	"errors"
	"sync"

	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/transformer"
)

// Engine is a base model on one device as sampling drives it: its KV
// caches and adapters live on that device, one pass runs many rows (every
// prompt of a prefill, every stream of a step), and logits come back a
// row at a time, so the sampler's draws need nothing else from the device.
// OnCPU is the CPU engine's; an executor runs the engine of the device it
// owns (docs/engine.md). The callbacks of Prefill and Step may run
// concurrently for distinct rows, and a row's logits are the engine's
// again once its call returns.
type Engine interface {
	// Config is the base model's.
	Config() model.Config
	// Freeze makes ad ready for this engine's passes; nil ad is the base
	// model.
	Freeze(ad *lora.Adapter[float32]) Adapter
	// NewCache is an empty KV cache on the engine's device.
	NewCache() Cache
	// Prefill extends each empty cache by its prompt under its adapter
	// (nil: the base model) and hands fn prompt i's logits at position t:
	// every position where all[i], else the last alone.
	Prefill(adapters []Adapter, caches []Cache, prompts [][]int, all []bool, fn func(i, t int, logits []float32)) error
	// Step appends tokens[b] to caches[b] under adapters[b], every row in
	// one pass, and hands fn row b's logits.
	Step(adapters []Adapter, caches []Cache, tokens []int, fn func(b int, logits []float32)) error
}

// Adapter is a LoRA adapter made ready by one engine's Freeze, for that
// engine's passes alone.
type Adapter interface {
	// Source is the adapter it was made from.
	Source() *lora.Adapter[float32]
}

// Cache is one sequence's KV cache on its engine's device.
type Cache interface {
	// Fork is an empty cache that continues after this one, which must not
	// grow after it (a prompt's cache, shared by its samples).
	Fork() Cache
	// Reserve makes room for tokens more positions, so that decoding does
	// not grow the cache a step at a time.
	Reserve(tokens int)
}

// errForeign is a cache or adapter handed to an engine that did not make
// it: a fault of the caller's.
var errForeign = errors.New("sampler: a cache or adapter of another engine")

// OnCPU is m as an Engine: the CPU engine (package transformer).
func OnCPU(m *transformer.Model[float32]) Engine {
	return &cpuEngine{m: m, arenas: sync.Pool{New: func() any { return transformer.NewArena[float32]() }}}
}

type cpuEngine struct {
	m      *transformer.Model[float32]
	arenas sync.Pool // *transformer.Arena[float32]: a step's logits and buffers, reused
}

type cpuCache struct {
	m *transformer.Model[float32]
	c *transformer.Cache[float32]
}

func (c *cpuCache) Fork() Cache        { return &cpuCache{m: c.m, c: c.c.Fork()} }
func (c *cpuCache) Reserve(tokens int) { c.m.Reserve(c.c, tokens) }

func (e *cpuEngine) Config() model.Config { return e.m.Cfg() }

func (e *cpuEngine) Freeze(ad *lora.Adapter[float32]) Adapter {
	if ad == nil {
		return nil
	}
	return e.m.Freeze(ad)
}

func (e *cpuEngine) NewCache() Cache { return &cpuCache{m: e.m, c: e.m.NewCache()} }

// rows turns the handles of a pass into the CPU engine's own.
func (e *cpuEngine) rows(adapters []Adapter, caches []Cache) ([]*transformer.Frozen[float32], []*transformer.Cache[float32], error) {
	zs, cs := make([]*transformer.Frozen[float32], len(adapters)), make([]*transformer.Cache[float32], len(caches))
	for i, a := range adapters {
		if a == nil {
			continue
		}
		z, ok := a.(*transformer.Frozen[float32])
		if !ok {
			return nil, nil, errForeign
		}
		zs[i] = z
	}
	for i, c := range caches {
		cc, ok := c.(*cpuCache)
		if !ok || cc.m != e.m {
			return nil, nil, errForeign
		}
		cs[i] = cc.c
	}
	return zs, cs, nil
}

func (e *cpuEngine) Prefill(adapters []Adapter, caches []Cache, prompts [][]int, all []bool, fn func(i, t int, logits []float32)) error {
	zs, cs, err := e.rows(adapters, caches)
	if err != nil {
		return err
	}
	hidden, err := e.m.ExtendRows(zs, cs, prompts)
	if err != nil {
		return err
	}
	D := e.m.Cfg().Hidden
	for i, h := range hidden {
		P, from := len(prompts[i]), 0
		if !all[i] {
			from = P - 1
		}
		e.m.Logits(zs[i], h[from*D:], P-from, nil, func(t int, row []float32) { fn(i, from+t, row) })
	}
	return nil
}

func (e *cpuEngine) Step(adapters []Adapter, caches []Cache, tokens []int, fn func(b int, logits []float32)) error {
	zs, cs, err := e.rows(adapters, caches)
	if err != nil {
		return err
	}
	ar := e.arenas.Get().(*transformer.Arena[float32])
	defer e.arenas.Put(ar)
	ar.Reset() // the last step's buffers are dead
	h, err := e.m.DecodeRows(zs, cs, tokens, ar)
	if err != nil {
		return err
	}
	e.m.LogitsRows(zs, h, len(tokens), ar, fn)
	return nil
}
