#!/usr/bin/env bash
# Engine benchmark, side by side with PyTorch (training, decode, GEMM) and
# llama.cpp (decode) on the same machine in the same run (these machines are shared and
# noisy: compare ratios, not absolutes).
# Generates the models it needs under ${DATA:-./data}/bench, and writes each
# figure's JSON into ${OUT:-build/bench} (wts bench summary reads them).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-./data}
PRESETS=${PRESETS:-"small qwen3-0.6b"}
OUT=${OUT:-build/bench}
mkdir -p "$OUT"
# Debian's python3-torch lives in the system interpreter; a python3 earlier on
# PATH (pyenv, a venv) may not see it.
PY=""
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import torch' 2>/dev/null; then PY=$p; break; fi
done
echo "== fp32 GEMM, GFLOP/s (wts, then OpenBLAS)"
go test ./kernels/gemm/ -run XXX -bench 'Sgemm/' -benchtime 1s | awk '
  /GFLOP/ { split($1, n, "/"); sub(/-[0-9]+$/, "", n[2]); shapes = shapes sep "\"" n[2] "\": " $(NF-1); sep = ", " }
  END { print "{\"engine\": \"wts\", \"gflops\": {" shapes "}}" }' | tee "$OUT/gemm-wts.json"
# keep runs each step's JSON into FILE only when the step succeeds, and
# shows it; a failed peer leaves no file (its rows read "not run").
keep() {
  local file=$1; shift
  if "$@" > "$file.tmp"; then mv "$file.tmp" "$file"; cat "$file"; else rm -f "$file.tmp"; return 1; fi
}
if [ -n "$PY" ]; then keep "$OUT/gemm-openblas.json" "$PY" bench/blas_gemm.py || echo "(no OpenBLAS figure)"; fi
echo "== causal attention (small's heads) and SwiGLU, ns per call"
go test ./kernels/ops/ -run XXX -bench 'Attention|SwiGLU' -benchtime 1s | awk '/ns\/op/ {print $1, $3}'
go build -buildvcs=true -o bin/wts ./cmd/wts
go build -buildvcs=true -o bin/enginebench ./bench/enginebench
# The llama.cpp peer: node-llama-cpp's prebuilt CPU build, pinned in
# bench/llamacpp/package-lock.json (npm install: some of its optional
# per-platform packages are not published, which npm ci refuses).
PEER=()
if command -v npm >/dev/null; then
  (cd bench/llamacpp && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --no-audit --no-fund --loglevel=error >/dev/null)
  PEER=(--llamacpp bench/llamacpp)
else
  echo "(node and npm not installed: no llama.cpp side)"
fi
if [ -n "$PY" ]; then PEER+=(--torch "$PY"); fi
for p in $PRESETS; do
  dir=$DATA/bench/$p
  [ -f "$dir/config.json" ] || ./bin/wts model init --preset "$p" --seed 1 --out "$dir" >/dev/null
  # The Qwen3 shape takes a minute a training step on two cores: fewer
  # iterations and decode rounds keep the run under half an hour.
  eflags=${ENGINE_FLAGS:-} tflags=${TORCH_FLAGS:-}
  if [ "$p" = qwen3-0.6b ]; then eflags=${ENGINE_FLAGS:-"--decode 24 --rounds 2 --iters 2"} tflags=${TORCH_FLAGS:-"--iters 2"}; fi
  echo "== $p"
  keep "$OUT/engine-$p.json" ./bin/enginebench --model "$dir" "${PEER[@]}" $eflags
  # Train and decode again with the base weights in bf16, beside the same
  # peers.
  keep "$OUT/engine-$p-bf16.json" ./bin/enginebench --model "$dir" --weights bf16 "${PEER[@]}" $eflags
  if [ -n "$PY" ]; then
    keep "$OUT/torch-train-$p.json" "$PY" bench/torch_train.py --model "$dir" $tflags || echo "(no PyTorch figure)"
  else
    echo "(python3-torch not installed: apt-get install python3-torch for the PyTorch side)"
  fi
done
