"""Makes sure OpenBLAS runs the kernels of the CPU it is on.

OpenBLAS 0.3.21 (Debian 12) picks its kernels from a table of CPU models,
and a model newer than the table gets Prescott's SSE3 kernels: on a 2-core
Emerald Rapids that was ~63 GFLOP/s for fp32 GEMM, against ~250–300 with its
SkylakeX (AVX-512) kernels, which is no peer at all. Import this before
torch: where the caller has not set OPENBLAS_CORETYPE, it asks the library
which kernels it chose, and if they are that fallback on a CPU with AVX-512
or AVX2, re-runs the script with the matching family named. Where torch's
BLAS is not OpenBLAS at all, it ends the script: no peer figure is better
than a crippled one.
"""
import ctypes
import ctypes.util
import os
import sys


def _corename():
    for name in ("libblas.so.3", ctypes.util.find_library("openblas") or ""):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    return ""  # not OpenBLAS: nothing to correct


def _family():
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags and "fma" in flags:
        return "Haswell"
    return ""


if "OPENBLAS_CORETYPE" not in os.environ and sys.platform == "linux" and _corename().lower() == "prescott":
    family = _family()
    if family:
        print(f"openblas_core: OpenBLAS fell back to Prescott's kernels; re-running with OPENBLAS_CORETYPE={family}", file=sys.stderr)
        os.environ["OPENBLAS_CORETYPE"] = family
        os.execv(sys.executable, [sys.executable] + sys.argv)

if sys.platform == "linux" and not _corename():
    # Debian's torch without libopenblas0-pthread runs the reference BLAS at a
    # few GFLOP/s: a figure against it would say nothing about wts.
    sys.exit("openblas_core: torch's BLAS is not OpenBLAS (apt-get install libopenblas0-pthread); "
             "no figure against a crippled peer")
