"""A GPT-style decoder trained with kiln's attention and with SDPA's, side by
side: same seed, same data, same steps; loss curves, tokens per second, peak
memory, and prefill latency of the trained models.

    python3 examples/gpt/train.py --corpus corpus.bin [--steps 300] [--out DIR]

Model: 6 layers, d_model 768, 12 heads of 64 (--kv-heads K: K/V heads for
them, grouped-query attention below 12), context 1024, byte-level
vocabulary (256), learned positions, pre-norm blocks, GELU MLP; bf16 autocast
over fp32 weights, AdamW (lr 6e-4, warm-up 50 steps, cosine to 10%), batch
16 x 1024 tokens. Attention takes the qkv projection as (B, N, 3, H, D):
kiln through kiln.attention_qkvpacked (its backward writes one dQKV), or
kiln.attention on its unbound (B, N, H, D) views ("kiln_unpacked"); SDPA on
the (B, H, N, D) transposes of those views. "kiln_fused" runs every layer
through kiln: attention_qkvpacked, layer_norm, linear (the MLP's bias and
GELU in the GEMM's epilogue: GELU's tanh form, as GPT-2's) and
cross_entropy for the loss, on the same fp32 parameters under autocast.

The corpus is any file of bytes; make_corpus.py writes one from Debian's
Python standard library sources (nothing is downloaded). Writes gpt.json
(every step's loss and time, per backend) to --out.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kiln  # noqa: E402


# Each takes the projection's qkv (B, N, 3, H, D) and returns (B, N, H, D).
def kiln_attention(qkv):
    return kiln.attention_qkvpacked(qkv, causal=True)


def kiln_unpacked(qkv):
    q, k, v = qkv.unbind(2)
    return kiln.attention(q, k, v, causal=True, layout="bshd")


def sdpa_attention(backend):
    def run(qkv):
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return o.transpose(1, 2)
    return run


BACKENDS = {
    "kiln": kiln_attention,
    "kiln_fused": kiln_attention,  # and kiln's norms, linears and loss
    "kiln_unpacked": kiln_unpacked,
    "sdpa_flash": sdpa_attention(SDPBackend.FLASH_ATTENTION),
    "sdpa_cudnn": sdpa_attention(SDPBackend.CUDNN_ATTENTION),
}


# With grouped-query attention (--kv-heads below --heads' 12): each takes q
# (B, N, H, D) and k, v (B, N, Hk, D) and returns (B, N, H, D).
def kiln_grouped(q, k, v):
    return kiln.attention(q, k, v, causal=True, layout="bshd")


def sdpa_grouped(backend):
    def run(q, k, v):
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return o.transpose(1, 2)
    return run


GROUPED_BACKENDS = {
    "kiln": kiln_grouped,
    "kiln_fused": kiln_grouped,
    "kiln_unpacked": kiln_grouped,
    "sdpa_flash": sdpa_grouped(SDPBackend.FLASH_ATTENTION),
    "sdpa_cudnn": sdpa_grouped(SDPBackend.CUDNN_ATTENTION),
}


def kiln_norm(ln, x):
    return kiln.layer_norm(x, ln.weight, ln.bias, ln.eps)


def kiln_linear(layer, x, activation="none"):
    return kiln.linear(x, layer.weight.t(), layer.bias, activation)


class Block(nn.Module):
    def __init__(self, d, heads, attention, fused=False, kv_heads=None):
        super().__init__()
        self.heads, self.attention, self.fused = heads, attention, fused
        self.kv_heads = kv_heads or heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        kv = 2 * self.kv_heads * (d // heads)
        self.qkv, self.proj = nn.Linear(d, d + kv), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attend(self, qkv):
        """The attention of the projection qkv (B, N, d + 2·Hk·D): packed
        (B, N, 3, H, D) without grouped heads, else q, k, v apart."""
        B, N, _ = qkv.shape
        D = self.proj.in_features // self.heads
        if self.kv_heads == self.heads:
            return self.attention(qkv.view(B, N, 3, self.heads, D))
        q, kv = qkv.split([self.heads * D, 2 * self.kv_heads * D], -1)
        k, v = kv.view(B, N, 2, self.kv_heads, D).unbind(2)
        return self.attention(q.view(B, N, self.heads, D), k, v)

    def forward(self, x):
        B, N, d = x.shape
        if self.fused:
            o = self.attend(kiln_linear(self.qkv, kiln_norm(self.ln1, x)))
            x = x + kiln_linear(self.proj, o.reshape(B, N, d))
            h = kiln_linear(self.fc, kiln_norm(self.ln2, x), "gelu")
            return x + kiln_linear(self.out, h)
        o = self.attend(self.qkv(self.ln1(x)))
        x = x + self.proj(o.reshape(B, N, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, attention, layers=6, d=768, heads=12, context=1024, vocab=256,
                 fused=False, kv_heads=None):
        super().__init__()
        self.fused = fused
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads, attention, fused, kv_heads)
                                    for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        if self.fused:
            return kiln_linear(self.head, kiln_norm(self.ln, x))
        return self.head(self.ln(x))

    def loss(self, x, y):
        """The mean cross-entropy of the next bytes (under autocast)."""
        logits = self(x)
        if self.fused:
            return kiln.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))


def model_for(name, context, kv_heads=12):
    """The GPT of backend `name` (kiln_fused: every layer through kiln),
    with kv_heads K/V heads for its 12 query heads (fewer: grouped-query)."""
    grouped = kv_heads != 12
    return GPT((GROUPED_BACKENDS if grouped else BACKENDS)[name], context=context,
               fused=name == "kiln_fused", kv_heads=kv_heads)


def batches(data, steps, batch, context, seed):
    """The same (input, target) batches for every backend."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, data.numel() - context - 1, (batch,), generator=g)
        x = torch.stack([data[s:s + context] for s in starts.tolist()])
        y = torch.stack([data[s + 1:s + 1 + context] for s in starts.tolist()])
        yield x.long(), y.long()


def train_step(model, opt, x, y):
    """One step: bf16 autocast forward, backward, clipping, the optimizer."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model.loss(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


def common_args(p, backends):
    """The options train.py and step_bench.py share."""
    p.add_argument("--corpus", required=True)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--backends", default=backends)
    p.add_argument("--kv-heads", type=int, default=12, choices=[1, 2, 3, 4, 6, 12],
                   help="K/V heads for the 12 query heads (below 12: grouped-query "
                        "attention, k and v projected apart from q)")


def train(name, data, args):
    torch.manual_seed(args.seed)
    dev = torch.device("cuda")
    model = model_for(name, args.context, args.kv_heads).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=0.1, fused=True)
    sched = lambda s: (s + 1) / 50 if s < 50 else 0.1 + 0.9 * 0.5 * (
        1 + math.cos(math.pi * (s - 50) / max(1, args.steps - 50)))
    lr = torch.optim.lr_scheduler.LambdaLR(opt, sched)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    losses, times = [], []
    for step, (x, y) in enumerate(batches(data, args.steps, args.batch, args.context, args.seed)):
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = train_step(model, opt, x, y)
        lr.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        if step % 50 == 0 or step == args.steps - 1:
            print(f"{name} step {step} loss {losses[-1]:.4f} {times[-1] * 1e3:.1f} ms", flush=True)
    timed = sorted(times[20:])
    step_s = timed[len(timed) // 2]
    return model, dict(losses=losses, step_ms=[t * 1e3 for t in times],
                       median_step_ms=step_s * 1e3,
                       tokens_per_s=args.batch * args.context / step_s,
                       peak_mib=torch.cuda.max_memory_allocated() / 2**20)


@torch.no_grad()
def prefill_ms(model, data, n, reps=20):
    x = data[:n].long().unsqueeze(0).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            model(x)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
    return sorted(times)[reps // 2]


def smooth(xs, w=25):
    return [sum(xs[max(0, i - w + 1):i + 1]) / (i + 1 - max(0, i - w + 1)) for i in range(len(xs))]


def main():
    p = argparse.ArgumentParser()
    common_args(p, "kiln,sdpa_flash,sdpa_cudnn")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--prefill", default="100,257,512,1000,1024")
    p.add_argument("--out", default=".")
    args = p.parse_args()
    data = torch.frombuffer(bytearray(open(args.corpus, "rb").read()), dtype=torch.uint8)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, corpus "
          f"{data.numel() / 2**20:.1f} MiB, {args.steps} steps of {args.batch}x{args.context}")
    results = {}
    for name in args.backends.split(","):
        model, r = train(name, data, args)
        r["prefill_ms"] = {n: prefill_ms(model, data, int(n)) for n in args.prefill.split(",")}
        results[name] = r
        del model
        torch.cuda.empty_cache()
    # Agreement: after the warm-up, the 25-step means of kiln's and SDPA's
    # losses differ by less than SDPA's own step-to-step noise (the standard
    # deviation of its losses about their 25-step mean).
    ref = results.get("sdpa_flash") or next(iter(results.values()))
    sm_ref = smooth(ref["losses"])
    noise = (sum((l - s) ** 2 for l, s in zip(ref["losses"][50:], sm_ref[50:])) /
             len(sm_ref[50:])) ** 0.5
    print("\nbackend,tokens_per_s,median_step_ms,peak_mib,final_loss_25,max_gap_25_after_50,"
          "prefill_ms(" + args.prefill + ")")
    for name, r in results.items():
        sm = smooth(r["losses"])
        gap = max(abs(a - b) for a, b in zip(sm[50:], sm_ref[50:]))
        r["max_smoothed_gap"], r["noise"] = gap, noise
        print(f"{name},{r['tokens_per_s']:.0f},{r['median_step_ms']:.2f},{r['peak_mib']:.0f},"
              f"{sm[-1]:.4f},{gap:.4f}," + "/".join(f"{v:.2f}" for v in r["prefill_ms"].values()))
    print(f"# noise (std of SDPA flash's loss about its 25-step mean, steps >= 50): {noise:.4f}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpt.json"), "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                       args=vars(args), results=results), f)


if __name__ == "__main__":
    main()
