package executor

import (
	"path/filepath"
	"testing"

	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/providers"
)

// A base saved in bfloat16 is kept in bf16: its weights take about half
// the memory of the same model saved in float32.
func TestBF16CheckpointLoadsInBF16(t *testing.T) {
	dirs := map[string]string{}
	for name, dt := range map[string]safetensors.DType{"f32": safetensors.F32, "bf16": safetensors.BF16} {
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
	bf16, err := n.model("bf16")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bf16.WeightBytes(), f32.WeightBytes()/2; got < want*99/100 || got > want*101/100 {
		t.Fatalf("bf16 base: %d bytes, want about %d", got, want)
	}
}
