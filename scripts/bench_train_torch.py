#!/usr/bin/env python3
"""PyTorch eager training throughput of the 374M Transformer: the same-run anchor of `hla bench train`.

  python3 scripts/bench_train_torch.py --out train-torch.json [--steps 30] [--batch 8] [--seq-len 2048]

The model is configs/models/transformer-340m.json's (hla's preset, targets.md's anchor): a
Llama-style Transformer, d 1024, 24 layers, 16 heads of 64 with RoPE (theta 10000), SwiGLU
2816, RMSNorm (eps 1e-6), vocab 32000, embeddings and head untied (374M parameters). One
training step: bf16 autocast over fp32 parameters, causal SDPA attention, mean cross-entropy
over every position, backward, global-norm clipping at 1.0, fused AdamW (lr 3e-4). Tokens are
uniform random ids (which ids they are does not change the cost). tokens/s is the mean over the
steps after the first --warmup (each step timed by CUDA events, B * T tokens each). Needs only
torch. Writes {"anchor": "torch eager", "device", "torch", "config", "batch", "seq_len",
"steps", "parameters", "ms_per_step", "tokens_per_s", "model_tflops", "mfu", "peak_gib"};
model FLOPs per token are hla's (train/trainer.cpp model_flops_per_token: 6 N + 6 T d per
attention layer), MFU against the H200's 989 TFLOP/s bf16 dense peak.
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--out", required=True)
parser.add_argument("--config", default=os.path.join(os.path.dirname(__file__), "..", "configs", "models",
                                                     "transformer-340m.json"))
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--seq-len", type=int, default=2048)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--warmup", type=int, default=5, help="steps left out of the mean")
PEAK_FLOPS = 989e12  # H200 bf16 dense (targets.md)


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope(x, cos, sin):
    """Rotate-half RoPE on x: (B, H, T, D) with cos, sin: (T, D)."""
    half = x.shape[-1] // 2
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, self.h, self.hd = c["hidden_size"], c["num_heads"], c["head_dim"]
        self.attn_norm, self.mlp_norm = RMSNorm(d, c["norm_eps"]), RMSNorm(d, c["norm_eps"])
        self.qkv = nn.Linear(d, 3 * self.h * self.hd, bias=False)
        self.o = nn.Linear(self.h * self.hd, d, bias=False)
        self.gate_up = nn.Linear(d, 2 * c["intermediate_size"], bias=False)
        self.down = nn.Linear(c["intermediate_size"], d, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(B, T, 3, self.h, self.hd).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(rope(q, cos, sin), rope(k, cos, sin), v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, -1))
        g, u = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Transformer(nn.Module):
    def __init__(self, c, seq_len):
        super().__init__()
        self.embed = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["norm_eps"])
        self.head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        inv = 1.0 / (10000.0 ** (torch.arange(0, c["head_dim"], 2).float() / c["head_dim"]))
        angles = torch.outer(torch.arange(seq_len).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, ids):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        return self.head(self.norm(x))


def main():
    args = parser.parse_args()
    with open(args.config) as f:
        c = json.load(f)
    torch.manual_seed(0)
    model = Transformer(c, args.seq_len).cuda()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    ids = torch.randint(0, c["vocab_size"], (args.batch, args.seq_len + 1), device="cuda")
    inputs, targets = ids[:, :-1], ids[:, 1:]

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    start = time.time()
    times = []
    torch.cuda.reset_peak_memory_stats()
    for i in range(args.steps):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        step()
        t1.record()
        t1.synchronize()
        if i >= args.warmup:
            times.append(t0.elapsed_time(t1))
    if not times:
        raise SystemExit(f"--steps {args.steps} leaves no step after --warmup {args.warmup}")
    ms = sum(times) / len(times)
    tokens_per_s = args.batch * args.seq_len / (ms / 1000)
    attention = 6.0 * args.seq_len * c["hidden_size"] * c["num_hidden_layers"]
    flops_per_token = 6.0 * params + attention
    out = {"anchor": "torch eager", "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "config": os.path.basename(args.config), "batch": args.batch, "seq_len": args.seq_len,
           "steps": args.steps, "warmup": args.warmup, "parameters": params, "ms_per_step": ms,
           "tokens_per_s": tokens_per_s, "model_tflops": flops_per_token * tokens_per_s / 1e12,
           "mfu": flops_per_token * tokens_per_s / PEAK_FLOPS,
           "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "seconds": round(time.time() - start, 1)}
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.out)
    print(f"torch eager: {params / 1e6:.0f}M parameters, {ms:.1f} ms/step, {tokens_per_s:,.0f} tokens/s, "
          f"MFU {100 * out['mfu']:.1f}%, peak {out['peak_gib']:.1f} GiB; wrote {args.out}")


if __name__ == "__main__":
    main()
