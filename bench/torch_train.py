#!/usr/bin/env python3
"""PyTorch peer for the engine benchmark: LoRA forward_backward tokens/s on the
same generated model folder, the same LoRA config (rank r on q,k,v,o,gate,up,
down; alpha 32) and the same batch shape as bench/enginebench.

It reuses the reference model from kernels/golden/gen_golden.py (HF modeling
semantics), with the base weights frozen and only the LoRA factors requiring
grad, and reports the faster of 1 and 2 threads (PyTorch 1.13 here is often
faster on one).

    python3 bench/torch_train.py --model DIR [--batch 4 --seq 128 --rank 16 --iters 5]
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openblas_core  # noqa: E402,F401 (before torch: OpenBLAS picks its kernels when it loads)
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels", "golden"))
import gen_golden as ref  # noqa: E402


def load_weights(d):
    """The model folder's weights by HF name (an untied head dropped) and its
    config, head_dim filled in."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    if os.path.exists(os.path.join(d, "model.safetensors")):
        w = ref.read_safetensors(os.path.join(d, "model.safetensors"))
    else:
        idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
        w = {}
        for shard in sorted(set(idx["weight_map"].values())):
            w.update(ref.read_safetensors(os.path.join(d, shard)))
    if cfg.get("tie_word_embeddings"):
        w.pop("lm_head.weight", None)
    cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    return w, cfg


def load_model(d, rank):
    w, cfg = load_weights(d)
    D, Q = cfg["hidden_size"], cfg["num_attention_heads"] * cfg["head_dim"]
    KV, I = cfg["num_key_value_heads"] * cfg["head_dim"], cfg["intermediate_size"]
    dims = {"q_proj": (Q, D), "k_proj": (KV, D), "v_proj": (KV, D), "o_proj": (D, Q), "gate_proj": (I, D), "up_proj": (I, D), "down_proj": (D, I)}
    g = torch.Generator().manual_seed(1)
    lora = {}
    for l in range(cfg["num_hidden_layers"]):
        for m in ref.MODULES:
            out, inp = dims[m]
            A = ((torch.rand(rank, inp, generator=g) * 2 - 1) / math.sqrt(inp)).requires_grad_(True)
            B = torch.zeros(out, rank).requires_grad_(True)
            lora[ref.lora_name(l, m)] = (A, B)
    return ref.Model(cfg, w, lora, 32.0 / rank), cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    model, cfg = load_model(args.model, args.rank)
    g = torch.Generator().manual_seed(1)
    toks = torch.randint(0, cfg["vocab_size"], (args.batch, args.seq + 1), generator=g)
    inp, tgt = toks[:, :-1], toks[:, 1:]

    def step():
        logits = model.forward(inp)
        logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, tgt[..., None])[..., 0]
        loss = -logp.sum()
        loss.backward()

    best = None
    for threads in (1, 2):
        torch.set_num_threads(threads)
        step()
        ts = []
        for _ in range(args.iters):
            t0 = time.perf_counter()
            step()
            ts.append(time.perf_counter() - t0)
        tps = args.batch * args.seq / statistics.median(ts)
        if best is None or tps > best[1]:
            best = (threads, tps)
    print(json.dumps({"engine": "pytorch " + torch.__version__, "model": args.model, "threads": best[0],
                      "tokens_per_step": args.batch * args.seq, "fwd_bwd_tokens_per_s": best[1]}, indent=2))


if __name__ == "__main__":
    main()
