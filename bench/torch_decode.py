#!/usr/bin/env python3
"""PyTorch peer of the engine's decode benchmark (bench/enginebench --torch):
greedy decoding with a KV cache on the same model folder, one stream and 16
streams (a batch of 16 rows, one cache each), through the reference model of
kernels/golden/gen_golden.py (HF modeling semantics, with its cache) and no
adapter. The prompt's prefill and each stream's first token are not timed,
so a stream makes decode-1 timed tokens. It prints JSON: tokens/s of each,
the medians of --rounds at the faster of 1 and 2 threads (the peer at its
best), and the first stream's greedy tokens (enginebench compares them with
its own).

    python3 bench/torch_decode.py --model DIR [--prompt 16] [--decode 64] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openblas_core  # noqa: E402,F401 (before torch: OpenBLAS picks its kernels when it loads)
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels", "golden"))
import gen_golden as ref  # noqa: E402
from torch_train import load_weights  # noqa: E402


def decode(m, prompt, streams, n):
    """Seconds of the timed steps of greedy decoding, and stream 0's tokens."""
    cache = [None] * m.cfg["num_hidden_layers"]
    toks = torch.tensor([prompt] * streams)
    nxt = m.forward(toks, cache)[:, -1].argmax(-1)  # prefill and the first token
    out = [int(nxt[0])]
    t0 = time.perf_counter()
    for _ in range(n - 1):
        nxt = m.forward(nxt[:, None], cache)[:, -1].argmax(-1)
        out.append(int(nxt[0]))
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    w, cfg = load_weights(args.model)
    m = ref.Model(cfg, w, {}, 1.0)
    prompt = [3 + (i * 7) % 50 for i in range(args.prompt)]
    out = {"engine": "pytorch " + torch.__version__, "model": args.model}
    with torch.no_grad():
        for streams, key, tkey in ((1, "decode_tokens_per_s", "threads"), (16, "decode_batch16_tokens_per_s", "batch16_threads")):
            best = None
            for threads in (1, 2):
                torch.set_num_threads(threads)
                decode(m, prompt, streams, 2)  # warm-up
                secs = [decode(m, prompt, streams, args.decode)[0] for _ in range(args.rounds)]
                tps = streams * (args.decode - 1) / statistics.median(secs)
                if best is None or tps > best[1]:
                    best = (threads, tps)
            out[key], out[tkey] = best[1], best[0]
        out["greedy_tokens"] = decode(m, prompt, 1, min(args.decode, 16))[1]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
