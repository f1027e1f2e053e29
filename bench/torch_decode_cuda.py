#!/usr/bin/env python3
"""PyTorch peer of the device decode benchmark (bench/gpubench --torch):
greedy decoding of the same model folder on the same GPU, weights in bf16
as transformers keeps them (norms computed in f32), a static KV cache and
scaled_dot_product_attention; one stream and --streams streams in lockstep.
Each is timed eager and with the decode step captured in a CUDA graph (no
launch overhead), and the faster is reported: the peer at its best. The
prompt's prefill and the first token are not timed, so a stream makes
decode-1 timed tokens. It prints JSON, with stream 0's greedy tokens.

    python3 bench/torch_decode_cuda.py --model DIR [--prompt 16 --decode 64 --streams 64 --rounds 3]
"""
import argparse
import json
import math
import os
import statistics
import struct
import time

import torch
import torch.nn.functional as F

DTYPES = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2), "F16": (torch.float16, 2)}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, size = DTYPES[info["dtype"]]
        a, b = info["data_offsets"]
        out[name] = torch.frombuffer(data, dtype=dt, count=(b - a) // size, offset=a).reshape(info["shape"])
    return out


def load(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    files = ["model.safetensors"]
    if not os.path.exists(os.path.join(d, files[0])):
        files = sorted(set(json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"].values()))
    w = {}
    for f in files:
        w.update(read_safetensors(os.path.join(d, f)))
    return cfg, w


class Peer:
    def __init__(self, cfg, w, dev, dtype, streams, max_len):
        self.c, self.dt = cfg, dtype
        self.w = {k: v.to(dev, dtype) for k, v in w.items()}
        if "lm_head.weight" not in self.w:
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        L, KV, hd = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, device=dev).float() / hd))
        self.k = torch.zeros(L, streams, KV, max_len, hd, device=dev, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.at = torch.arange(max_len, device=dev)
        # Grouped-query attention in the fused kernel where this PyTorch has
        # it (2.5 and later), the fused kernel on repeated heads where it
        # has only that (2.0), plain products before.
        self.sdpa = getattr(F, "scaled_dot_product_attention", None)
        self.gqa = False
        if self.sdpa:
            try:
                q = torch.zeros(1, 2, 1, 4, device=dev, dtype=dtype)
                self.sdpa(q, q[:, :1], q[:, :1], enable_gqa=True)
                self.gqa = True
            except TypeError:
                pass

    def rms(self, x, w):
        x32 = x.float()
        return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.c["rms_norm_eps"])).to(self.dt)

    def lin(self, x, name):
        y = x @ self.w[name + ".weight"].T
        b = self.w.get(name + ".bias")
        return y if b is None else y + b

    def attend(self, q, k, v, mask):
        if self.gqa:
            return self.sdpa(q, k, v, attn_mask=mask, enable_gqa=True)
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        if self.sdpa:
            return self.sdpa(q, k, v, attn_mask=mask)
        s = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
        return torch.softmax(s.masked_fill(~mask, float("-inf")), -1).to(self.dt) @ v

    def step(self, tok, pos):
        """tok [B, 1] ids at position pos ([1], on the device): the greedy next ids [B]."""
        c, w = self.c, self.w
        B = tok.shape[0]
        H, KV, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        x = w["model.embed_tokens.weight"][tok]
        ang = pos.float()[:, None] * self.inv[None, :]
        emb = torch.cat((ang, ang), dim=-1)
        cos, sin = emb.cos().to(self.dt)[None, None], emb.sin().to(self.dt)[None, None]
        mask = (self.at <= pos)[None, None, None, :]
        for l in range(c["num_hidden_layers"]):
            p = f"model.layers.{l}."
            h = self.rms(x, w[p + "input_layernorm.weight"])
            q = self.lin(h, p + "self_attn.q_proj").view(B, 1, H, hd).transpose(1, 2)
            k = self.lin(h, p + "self_attn.k_proj").view(B, 1, KV, hd).transpose(1, 2)
            v = self.lin(h, p + "self_attn.v_proj").view(B, 1, KV, hd).transpose(1, 2)
            if c["model_type"] == "qwen3":
                q = self.rms(q, w[p + "self_attn.q_norm.weight"])
                k = self.rms(k, w[p + "self_attn.k_norm.weight"])
            q = q * cos + torch.cat((-q[..., hd // 2:], q[..., :hd // 2]), -1) * sin
            k = k * cos + torch.cat((-k[..., hd // 2:], k[..., :hd // 2]), -1) * sin
            self.k[l].index_copy_(2, pos, k)
            self.v[l].index_copy_(2, pos, v)
            a = self.attend(q, self.k[l], self.v[l], mask)
            x = x + self.lin(a.transpose(1, 2).reshape(B, 1, H * hd), p + "self_attn.o_proj")
            h = self.rms(x, w[p + "post_attention_layernorm.weight"])
            g = self.lin(h, p + "mlp.gate_proj")
            x = x + self.lin(F.silu(g) * self.lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
        x = self.rms(x, w["model.norm.weight"])
        return (x[:, -1] @ w["lm_head.weight"].T).float().argmax(-1)


def decode(peer, prompt, streams, n, graph, dev):
    """Seconds of the timed steps and stream 0's tokens."""
    tok = torch.tensor([prompt[0]] * streams, device=dev)[:, None]
    pos = torch.zeros(1, dtype=torch.long, device=dev)
    for i in range(len(prompt)):  # prefill, a token a step
        tok[:, 0] = prompt[i]
        pos.fill_(i)
        nxt = peer.step(tok, pos)
    step = lambda: peer.step(tok, pos)  # noqa: E731
    if graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                peer.step(tok, pos)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = peer.step(tok, pos)

        def step():
            g.replay()
            return out
    toks = [nxt[:1]]
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for i in range(n - 1):
        tok[:, 0] = nxt
        pos.fill_(len(prompt) + i)
        nxt = step().clone()
        toks.append(nxt[:1])
    sync()
    return time.perf_counter() - t0, [int(t) for t in torch.cat(toks)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    cfg, w = load(args.model)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    prompt = [3 + (i * 7) % 50 for i in range(args.prompt)]
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    out = {"engine": f"pytorch {torch.__version__} ({name}, {str(dtype).replace('torch.', '')})", "model": args.model}
    with torch.inference_mode():
        for streams, key in ((1, "decode_tokens_per_s"), (args.streams, "decode_batch_tokens_per_s")):
            peer = Peer(cfg, w, args.device, dtype, streams, args.prompt + args.decode)
            best = None
            for graph in ((False, True) if args.device == "cuda" else (False,)):
                decode(peer, prompt, streams, 4, graph, args.device)  # warm-up
                secs = [decode(peer, prompt, streams, args.decode, graph, args.device)[0] for _ in range(args.rounds)]
                tps = streams * (args.decode - 1) / statistics.median(secs)
                if best is None or tps > best[0]:
                    best = (tps, "cuda graph" if graph else "eager")
            out[key], out[key.replace("tokens_per_s", "mode")] = best
            if streams == 1:
                out["greedy_tokens"] = decode(peer, prompt, 1, 16, False, args.device)[1]
            del peer
    out["batch_streams"] = args.streams
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
