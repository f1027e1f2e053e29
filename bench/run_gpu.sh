#!/usr/bin/env bash
# The GPU checks, run on a machine with an NVIDIA device from the binaries
# `make cuda-bins` built (bin/cuda.test, bin/gpubench): the
# device's description, the CUDA tests (kernels/cuda: PyTorch's golden
# logits and logprobs, the CPU engine's logits through prefill and decode,
# refused rows), then the device decode benchmark on the Qwen3-0.6B shape
# beside PyTorch on the same device when a python3 with CUDA PyTorch is on
# PATH. Everything it prints is also written under ${OUT:-build/gpu}. It
# exits with the tests' status.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free,compute_cap --format=csv | tee "$OUT/device.txt"
(cd kernels/cuda && ../../bin/cuda.test -test.v -test.count=1 -test.timeout 300s) 2>&1 | tee "$OUT/tests.txt"
tests=${PIPESTATUS[0]}
PEER=()
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  PEER=(--torch python3)
else
  echo "(no CUDA PyTorch on PATH: no PyTorch side)"
fi
for preset in ${PRESETS:-small qwen3-0.6b}; do
  echo "== $preset"
  bin/gpubench --model "${DATA:-/tmp/wts-gpu}/$preset" --preset "$preset" "${PEER[@]}" --json "$OUT/gpubench-$preset.json" 2>&1 | tee "$OUT/gpubench-$preset.txt"
done
exit "$tests"
