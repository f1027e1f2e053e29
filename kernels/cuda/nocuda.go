//go:build !cuda

package cuda

import (
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
)

// Devices reports no devices: the binary cannot drive one.
func Devices() ([]Device, error) { return nil, nil }

// Model is the device model; without -tags cuda none can be loaded.
type Model struct{}

// Load refuses: the binary was built without the device code.
func Load(*model.Weights[float32], *lora.Adapter[float32], Options) (*Model, error) {
	return nil, ErrNoCUDA
}

// Step is never reached: Load returns no model.
func (m *Model) Step([]int, []int, []int, []float32) ([]int, error) { return nil, ErrNoCUDA }

// Close does nothing.
func (m *Model) Close() {}

// Bandwidth is unknown without a device.
func Bandwidth(int, int64) (float64, error) { return 0, ErrNoCUDA }
