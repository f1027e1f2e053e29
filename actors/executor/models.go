package executor

import (
	"fmt"
	"sync"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/transformer"
	"github.com/wts-project/wts/providers"
)

// models loads each catalog model once per node: the trainer's executor
// and the samplers' share its weights, which nothing writes after loading.
type models struct {
	mu      sync.Mutex
	loaded  map[string]*transformer.Model[float32]
	engines map[string]sampler.Engine
}

// engine returns the catalog model name as the sampling executor runs it:
// the engine of the device it owns, the CPU's (over the weights the
// trainers share), made once so that its streams batch together.
func (s *node) engine(name string) (sampler.Engine, error) {
	m, err := s.model(name)
	if err != nil {
		return nil, err
	}
	s.models.mu.Lock()
	defer s.models.mu.Unlock()
	if e := s.models.engines[name]; e != nil {
		return e, nil
	}
	if s.models.engines == nil {
		s.models.engines = map[string]sampler.Engine{}
	}
	e := sampler.OnCPU(m)
	s.models.engines[name] = e
	return e, nil
}

// model returns the catalog model name, loading it the first time.
func (s *node) model(name string) (*transformer.Model[float32], error) {
	s.models.mu.Lock()
	defer s.models.mu.Unlock()
	if m := s.models.loaded[name]; m != nil {
		return m, nil
	}
	entry, ok := s.env.Catalog.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not in the catalog", kerr.ErrBadModel, name)
	}
	f, err := model.Open(entry.Dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	half := map[string]gemm.Half{providers.WeightsBF16: gemm.BF16, providers.WeightsF16: gemm.F16}[entry.Weights]
	m, err := transformer.Load(f, transformer.Options{Half: half})
	if err != nil {
		return nil, err
	}
	if s.models.loaded == nil {
		s.models.loaded = map[string]*transformer.Model[float32]{}
	}
	s.models.loaded[name] = m
	return m, nil
}
