package executor

import (
	"fmt"
	"sync"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/train"
	"github.com/wts-project/wts/kernels/transformer"
	"github.com/wts-project/wts/providers"
)

// models loads each catalog model once per node: the trainer's executor
// and the samplers' share its weights, which nothing writes after loading.
type models struct {
	mu       sync.Mutex
	loaded   map[string]*transformer.Model[float32]
	sampling map[string]sampler.Engine
	training map[string]train.Engine
}

// samplingEngine and trainingEngine return the catalog model name as the
// executors run it: the engine of the device they own, the CPU's (over
// the weights both share), each made once per model, so that a model's
// streams batch together and its runs' passes share (and so that its
// learners share one arena: the trainer's executor runs them one at a
// time).
func (s *node) samplingEngine(name string) (sampler.Engine, error) {
	return engineOf(s, name, &s.models.sampling, sampler.OnCPU)
}

func (s *node) trainingEngine(name string) (train.Engine, error) {
	return engineOf(s, name, &s.models.training, train.OnCPU)
}

func engineOf[E any](s *node, name string, made *map[string]E, on func(*transformer.Model[float32]) E) (E, error) {
	m, err := s.model(name)
	if err != nil {
		var none E
		return none, err
	}
	s.models.mu.Lock()
	defer s.models.mu.Unlock()
	e, ok := (*made)[name]
	if !ok {
		if *made == nil {
			*made = map[string]E{}
		}
		e = on(m)
		(*made)[name] = e
	}
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
