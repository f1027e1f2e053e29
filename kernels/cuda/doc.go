// Package cuda runs the decode engine on NVIDIA devices: a model's weights
// resident on one device (bf16 or f32, accumulated in f32), a KV cache slot
// per stream, and the greedy pick on the device, so that only tokens (and,
// when asked, logits) cross to the host.
//
// The device code lives in csrc/ and is compiled by nvcc into a static
// library (make cuda); this package links it only when built with
// -tags cuda. Without the tag, Devices reports none and Load refuses, so
// the project builds and tests on machines without a GPU.
package cuda

import "errors"

// ErrNoCUDA is returned by a build without -tags cuda.
var ErrNoCUDA = errors.New("cuda: this binary was built without -tags cuda")

// Device is one GPU as the node reports it: what placement reads.
type Device struct {
	Index        int
	Name         string
	TotalBytes   uint64
	FreeBytes    uint64
	Major, Minor int // compute capability
}

// Options size a model's resources on its device.
type Options struct {
	Device  int
	BF16    bool // store the base weights as bf16 (norms and biases stay f32)
	Slots   int  // KV cache slots: streams that may be open at once
	MaxLen  int  // positions per slot
	MaxRows int  // rows of one step: streams decoded together, or a prompt's tokens
	// Graphs captures a step of each row count in a CUDA graph on its
	// first use and replays it: one launch in place of ~20 kernels a layer
	// (bench/gpubench measures both).
	Graphs bool
}
