#!/usr/bin/env python3
"""OpenBLAS's fp32 GEMM (through PyTorch, which Debian links to the system
libblas; install libopenblas0-pthread so that is OpenBLAS) on the shapes of
`go test ./kernels/gemm -bench Sgemm`: C[m,n] = A[m,k]·W[n,k]ᵀ.

    python3 bench/blas_gemm.py
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openblas_core  # noqa: E402,F401 (before torch: OpenBLAS picks its kernels when it loads)
import torch  # noqa: E402

SHAPES = [(512, 512, 512), (512, 1280, 512), (512, 1024, 1024), (512, 3072, 1024), (512, 1024, 3072), (1024, 1024, 1024)]


def main():
    torch.set_num_threads(2)
    out = {}
    for m, n, k in SHAPES:
        a, w = torch.rand(m, k), torch.rand(n, k)
        c = torch.empty(m, n)
        torch.mm(a, w.t(), out=c)
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            torch.mm(a, w.t(), out=c)
            reps += 1
        secs = (time.perf_counter() - t0) / reps
        out[f"{m}x{n}x{k}"] = round(2 * m * n * k / secs / 1e9, 1)
    print(json.dumps({"engine": "openblas via torch " + torch.__version__, "gflops": out}, indent=2))


if __name__ == "__main__":
    main()
