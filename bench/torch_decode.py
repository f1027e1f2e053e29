#!/usr/bin/env python3
"""PyTorch peer of the engine's decode benchmark (bench/enginebench --torch):
greedy decoding with a KV cache on the same model folder, one stream and 16
streams (a batch of 16 rows, one cache each), through the reference model of
kernels/golden/gen_golden.py (HF modeling semantics) with no adapter. The
prompt's prefill and each stream's first token are not timed, so a stream
makes decode-1 timed tokens. It prints JSON: tokens/s of each, the medians
of --rounds at the faster of 1 and 2 threads (the peer at its best), and
the first stream's greedy tokens (enginebench compares them with its own).

    python3 bench/torch_decode.py --model DIR [--prompt 16] [--decode 64] [--rounds 3]
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
from torch_train import load_weights  # noqa: E402


def forward_cached(m, toks, cache):
    """The logits of the last of toks [B, T], after the positions cache
    holds (a list of per-layer (k, v) [B, past, KV, hd], None when empty),
    which it extends."""
    c, w = m.cfg, m.w
    B, T = toks.shape
    H, KV, hd, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
    past = 0 if cache[0] is None else cache[0][0].shape[1]
    x = w["model.embed_tokens.weight"][toks]
    freqs = torch.arange(past, past + T).float()[:, None] @ m.inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    mask = torch.full((T, past + T), float("-inf")).triu(past + 1)
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = ref.rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = m.lin(h, p + "self_attn.q_proj", "").view(B, T, H, hd)
        k = m.lin(h, p + "self_attn.k_proj", "").view(B, T, KV, hd)
        v = m.lin(h, p + "self_attn.v_proj", "").view(B, T, KV, hd)
        if c["model_type"] == "qwen3":
            q = ref.rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = ref.rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + ref.rotate_half(q) * sin
        k = k * cos + ref.rotate_half(k) * sin
        if cache[l] is not None:
            k = torch.cat((cache[l][0], k), dim=1)
            v = torch.cat((cache[l][1], v), dim=1)
        cache[l] = (k, v)
        rep = H // KV
        kr, vr = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        scores = torch.einsum("bthd,bshd->bhts", q, kr) / math.sqrt(hd) + mask
        attn = torch.einsum("bhts,bshd->bthd", torch.softmax(scores, dim=-1), vr).reshape(B, T, H * hd)
        x = x + m.lin(attn, p + "self_attn.o_proj", "")
        h = ref.rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g, u = m.lin(h, p + "mlp.gate_proj", ""), m.lin(h, p + "mlp.up_proj", "")
        x = x + m.lin(torch.nn.functional.silu(g) * u, p + "mlp.down_proj", "")
    h = ref.rms_norm(x[:, -1], w["model.norm.weight"], eps)
    head = "lm_head" if "lm_head.weight" in w else "model.embed_tokens"
    return m.lin(h, head, "")


def decode(m, prompt, streams, n):
    """Seconds of the timed steps of greedy decoding, and stream 0's tokens."""
    cache = [None] * m.cfg["num_hidden_layers"]
    toks = torch.tensor([prompt] * streams)
    nxt = forward_cached(m, toks, cache).argmax(-1)  # prefill and the first token
    out = [int(nxt[0])]
    t0 = time.perf_counter()
    for _ in range(n - 1):
        nxt = forward_cached(m, nxt[:, None], cache).argmax(-1)
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
