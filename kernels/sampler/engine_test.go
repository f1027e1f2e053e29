package sampler_test

import (
	"testing"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/sampler/enginetest"
	"github.com/wts-project/wts/kernels/transformer"
)

// The CPU engine keeps the Engine contract, with float32 and with bf16
// base weights.
func TestCPUEngine(t *testing.T) {
	for _, o := range []transformer.Options{{}, {Half: gemm.BF16}} {
		e, ad := sampler.CPUFixture(t, o)
		enginetest.Check(t, e, ad, 1e-4)
	}
}
