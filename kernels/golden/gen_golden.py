#!/usr/bin/env python3
"""Regenerates the PyTorch golden files the Go engine is tested against.

Usage (from the repository root; needs Debian's python3-torch and python3-numpy):

    make golden        # or: python3 kernels/golden/gen_golden.py --wts bin/wts

For each tiny preset it asks `wts model init` for the deterministic model,
builds an independent PyTorch implementation of the same architecture (written
from transformers' Llama/Qwen2/Qwen3 modeling code: rotate-half RoPE with
Llama-3 scaling, repeat_kv GQA, RMSNorm, SwiGLU, q/k/v bias, q/k head norm),
attaches a LoRA adapter with random A and B (saved here in PEFT format, so the
Go side also proves it loads a PEFT file it did not write), and records:

  * logits of the first datum, per-token target logprobs, loss:sum of every
    loss (Tinker's formulas), and the gradient of every LoRA tensor (autograd);
  * the adapter after three torch.optim.AdamW steps with gradient clipping.

Each preset is also saved in bfloat16 and in float16 (`wts model init --dtype
BF16`, `F16`) and run with PyTorch's own upcast of those weights to float32
(PRESET-bf16.json, PRESET-f16.json: the same adapter and data; no AdamW
steps): what a base kept in that type must compute.
"""
import argparse
import hashlib
import json
import math
import os
import struct
import subprocess
import tempfile

import numpy as np
import torch

torch.set_num_threads(1)
torch.manual_seed(0)
PRESETS = ["tiny", "tiny-qwen2", "tiny-qwen3", "tiny-llama3"]
HERE = os.path.dirname(os.path.abspath(__file__))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        if info["dtype"] in ("BF16", "F16"):
            # PyTorch's own 16-bit tensor, upcast as such a model is run in float32.
            half = torch.bfloat16 if info["dtype"] == "BF16" else torch.float16
            t = torch.frombuffer(bytearray(data[a:b]), dtype=half).reshape(info["shape"]).float()
        else:
            assert info["dtype"] == "F32", info
            t = torch.from_numpy(np.frombuffer(data[a:b], dtype="<f4").reshape(info["shape"]).copy())
        out[name] = t
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        arr = tensors[name].detach().numpy().astype("<f4")
        b = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hdr = json.dumps(header).encode()
    hdr += b" " * ((8 - len(hdr) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)))
        f.write(hdr)
        for b in blobs:
            f.write(b)


def inv_freq(cfg):
    hd, base = cfg["head_dim"], cfg["rope_theta"]
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type") == "llama3":
        factor, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
        low_wave, high_wave = old / lo, old / hi
        wave = 2 * math.pi / inv
        scaled = torch.where(wave > low_wave, inv / factor, inv)
        smooth = (old / wave - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wave < high_wave) * ~(wave > low_wave)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_name(layer, mod):
    part = "mlp" if mod in ("gate_proj", "up_proj", "down_proj") else "self_attn"
    return f"base_model.model.model.layers.{layer}.{part}.{mod}"


class Model:
    def __init__(self, cfg, w, lora, scale):
        self.cfg, self.w, self.lora, self.scale = cfg, w, lora, scale
        self.inv = inv_freq(cfg)

    def lin(self, x, prefix, lname):
        y = x @ self.w[prefix + ".weight"].T
        if prefix + ".bias" in self.w:
            y = y + self.w[prefix + ".bias"]
        if lname in self.lora:
            A, B = self.lora[lname]
            y = y + self.scale * (x @ A.T) @ B.T
        return y

    def forward(self, tokens, cache=None):
        """tokens: a list of ids [T] or a [B, T] tensor; logits [T, V] or [B, T, V].
        cache: None, or a list with one entry per layer (None while empty)
        that holds the keys and values [B, past, KV, hd] of the positions
        before tokens, which the call extends (decoding, bench/torch_decode.py)."""
        c, w = self.cfg, self.w
        toks = torch.as_tensor(tokens)
        single = toks.dim() == 1
        if single:
            toks = toks[None]
        B, T = toks.shape
        H, KV, hd, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
        past = 0 if cache is None or cache[0] is None else cache[0][0].shape[1]
        x = w["model.embed_tokens.weight"][toks]
        pos = torch.arange(past, past + T).float()
        freqs = pos[:, None] @ self.inv[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
        mask = torch.full((T, past + T), float("-inf")).triu(past + 1)
        for l in range(c["num_hidden_layers"]):
            p = f"model.layers.{l}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
            q = self.lin(h, p + "self_attn.q_proj", lora_name(l, "q_proj")).view(B, T, H, hd)
            k = self.lin(h, p + "self_attn.k_proj", lora_name(l, "k_proj")).view(B, T, KV, hd)
            v = self.lin(h, p + "self_attn.v_proj", lora_name(l, "v_proj")).view(B, T, KV, hd)
            if c["model_type"] == "qwen3":
                q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
                k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if cache is not None:
                if cache[l] is not None:
                    k, v = torch.cat((cache[l][0], k), dim=1), torch.cat((cache[l][1], v), dim=1)
                cache[l] = (k, v)
            rep = H // KV
            k = k.repeat_interleave(rep, dim=2)
            v = v.repeat_interleave(rep, dim=2)
            scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd) + mask
            probs = torch.softmax(scores, dim=-1)
            attn = torch.einsum("bhts,bshd->bthd", probs, v).reshape(B, T, H * hd)
            x = x + self.lin(attn, p + "self_attn.o_proj", lora_name(l, "o_proj"))
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
            g = self.lin(h, p + "mlp.gate_proj", lora_name(l, "gate_proj"))
            u = self.lin(h, p + "mlp.up_proj", lora_name(l, "up_proj"))
            x = x + self.lin(torch.nn.functional.silu(g) * u, p + "mlp.down_proj", lora_name(l, "down_proj"))
        h = rms_norm(x, w["model.norm.weight"], eps)
        head = "lm_head" if "lm_head.weight" in w else "model.embed_tokens"
        logits = self.lin(h, head, "base_model.model.lm_head")
        return logits[0] if single else logits


def token_losses(name, logp, d):
    """Tinker's built-in losses, per token (summed by the caller)."""
    if name == "cross_entropy":
        return -logp * torch.tensor(d["weights"])
    q, a = torch.tensor(d["logprobs"]), torch.tensor(d["advantages"])
    ratio = torch.exp(logp - q)
    if name == "importance_sampling":
        return -ratio * a
    if name == "ppo":
        clipped = torch.clamp(ratio, 0.8, 1.2)
        return -torch.min(ratio * a, clipped * a)
    if name == "cispo":
        return -(torch.clamp(ratio, 0.8, 1.2).detach() * logp * a)
    if name == "dro":
        return -(logp * a - 0.5 * 0.05 * (logp - q) ** 2)
    raise ValueError(name)


def batch_loss(model, data, name):
    total, lps, logits0 = 0, [], None
    for i, d in enumerate(data):
        logits = model.forward(d["model_input"])
        if i == 0:
            logits0 = logits
        logp = torch.log_softmax(logits, dim=-1)[torch.arange(len(d["model_input"])), torch.tensor(d["target_tokens"])]
        lps.append(logp)
        total = total + token_losses(name, logp, d).sum()
    return total, lps, logits0


def golden(preset, wts, outdir, dtype):
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([wts, "model", "init", "--preset", preset, "--seed", "1", "--dtype", dtype, "--out", tmp], check=True, stdout=subprocess.DEVNULL)
        cfg = json.load(open(os.path.join(tmp, "config.json")))
        raw = open(os.path.join(tmp, "model.safetensors"), "rb").read()
        weights = read_safetensors(os.path.join(tmp, "model.safetensors"))
    rng = np.random.default_rng(PRESETS.index(preset))
    r, alpha, L = 4, 8.0, cfg["num_hidden_layers"]
    D, Q, KVd, I, V = cfg["hidden_size"], cfg["num_attention_heads"] * cfg["head_dim"], cfg["num_key_value_heads"] * cfg["head_dim"], cfg["intermediate_size"], cfg["vocab_size"]
    dims = {"q_proj": (Q, D), "k_proj": (KVd, D), "v_proj": (KVd, D), "o_proj": (D, Q), "gate_proj": (I, D), "up_proj": (I, D), "down_proj": (D, I)}
    lora = {}
    for l in range(L):
        for m in MODULES:
            out, inp = dims[m]
            lora[lora_name(l, m)] = (torch.tensor(rng.uniform(-1, 1, (r, inp)) / math.sqrt(inp), dtype=torch.float32),
                                     torch.tensor(rng.uniform(-0.1, 0.1, (out, r)), dtype=torch.float32))
    lora["base_model.model.lm_head"] = (torch.tensor(rng.uniform(-1, 1, (r, D)) / math.sqrt(D), dtype=torch.float32),
                                        torch.tensor(rng.uniform(-0.1, 0.1, (V, r)), dtype=torch.float32))
    adir = os.path.join(outdir, preset + "-adapter")
    os.makedirs(adir, exist_ok=True)
    tensors = {}
    for n, (A, B) in lora.items():
        tensors[n + ".lora_A.weight"], tensors[n + ".lora_B.weight"] = A, B
    write_safetensors(os.path.join(adir, "adapter_model.safetensors"), tensors)
    json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha, "lora_dropout": 0.0,
               "target_modules": MODULES + ["lm_head"], "bias": "none", "fan_in_fan_out": False, "use_rslora": False,
               "use_dora": False, "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {},
               "base_model_name_or_path": preset, "inference_mode": True}, open(os.path.join(adir, "adapter_config.json"), "w"), indent=2)

    data = []
    for n in (19, 9):
        toks = rng.integers(0, V, n + 1).tolist()
        data.append({"model_input": toks[:-1], "target_tokens": toks[1:], "weights": rng.uniform(0, 1, n).round(4).tolist(),
                     "advantages": rng.uniform(-1, 1, n).round(4).tolist()})
    params = []
    for A, B in lora.values():
        A.requires_grad_(True)
        B.requires_grad_(True)
        params += [A, B]
    model = Model(cfg, weights, lora, alpha / r)
    with torch.no_grad():
        _, base_lps, _ = batch_loss(model, [dict(d, logprobs=[0] * len(d["target_tokens"])) for d in data], "cross_entropy")
    offsets = [-0.5, -0.05, 0.05, 0.5]
    for i, d in enumerate(data):
        d["logprobs"] = [round(float(lp) + offsets[(i + j) % 4], 6) for j, lp in enumerate(base_lps[i])]

    result = {"preset": preset, "dtype": dtype, "model_sha256": hashlib.sha256(raw).hexdigest(), "data": data, "losses": {}}
    for name in ["cross_entropy", "importance_sampling", "ppo", "cispo", "dro"]:
        for p in params:
            p.grad = None
        total, lps, logits0 = batch_loss(model, data, name)
        total.backward()
        entry = {"loss_sum": total.item(), "logprobs": [lp.detach().tolist() for lp in lps]}
        if name in ("cross_entropy", "ppo"):
            grads = {}
            for n, (A, B) in lora.items():
                grads[n + ".lora_A.weight"] = A.grad.flatten().tolist()
                grads[n + ".lora_B.weight"] = B.grad.flatten().tolist()
            entry["grads"] = grads
        if name == "cross_entropy":
            result["logits0"] = logits0.detach().flatten().tolist()
        result["losses"][name] = entry

    suffix = {"F32": "", "BF16": "-bf16", "F16": "-f16"}[dtype]
    if dtype != "F32":
        with open(os.path.join(outdir, preset + suffix + ".json"), "w") as f:
            json.dump(result, f)
        print("wrote", preset, dtype)
        return
    hp = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.01, "grad_clip_norm": 1.0}
    opt = torch.optim.AdamW(params, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"], weight_decay=hp["weight_decay"])
    norms = []
    for _ in range(3):
        opt.zero_grad()
        total, _, _ = batch_loss(model, data, "cross_entropy")
        total.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, hp["grad_clip_norm"])))
        opt.step()
    after = {}
    for n, (A, B) in lora.items():
        after[n + ".lora_A.weight"] = A.detach().flatten().tolist()
        after[n + ".lora_B.weight"] = B.detach().flatten().tolist()
    result["adamw"] = {"params": hp, "steps": 3, "grad_norms": norms, "adapter": after}
    with open(os.path.join(outdir, preset + ".json"), "w") as f:
        json.dump(result, f)
    print("wrote", preset)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wts", default="bin/wts")
    ap.add_argument("--out", default=os.path.join(HERE, "testdata"))
    args = ap.parse_args()
    print("torch", torch.__version__)
    for p in PRESETS:
        for dtype in ("F32", "BF16", "F16"):
            golden(p, args.wts, args.out, dtype)


if __name__ == "__main__":
    main()
