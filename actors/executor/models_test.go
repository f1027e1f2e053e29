package executor

import (
	"path/filepath"
	"testing"

	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/providers"
)

// A base saved in bfloat16 or float16 is kept in that type: its weights
// take about half the memory of the same model saved in float32.
func TestHalfCheckpointsLoadInHalf(t *testing.T) {
	dirs := map[string]string{}
	types := map[string]safetensors.DType{"f32": safetensors.F32, "bf16": safetensors.BF16, "f16": safetensors.F16}
	for name, dt := range types {
		dirs[name] = filepath.Join(t.TempDir(), name)
		if err := model.Generate("small", 1, dirs[name], dt); err != nil {
			t.Fatal(err)
		}
	}
	c, err := providers.NewCatalog(dirs)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{env: Env{Catalog: c}}
	f32, err := n.model("f32")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bf16", "f16"} {
		m, err := n.model(name)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.WeightBytes(), f32.WeightBytes()/2; got < want*99/100 || got > want*101/100 {
			t.Fatalf("%s base: %d bytes, want about %d", name, got, want)
		}
	}
}
