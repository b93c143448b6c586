#!/usr/bin/env python3
"""Random problems for kiln's other Python ops, against float64, on a GPU.

kiln.linear (M, N, K from 1 to ~1500, bias, activation, the weight's
layout and an x of three dimensions drawn; gradients for some),
kiln.rms_norm and kiln.layer_norm (rows and columns drawn, bf16 or float32
tensors or float32 under bf16 autocast; gradients for some),
kiln.rotary (lengths, head sizes, layouts, positions, non-contiguous x),
kiln.cross_entropy (rows, vocabularies of any size, logits as views with
padded rows, ignored labels, each reduction; and its gradient). Fresh
standard-normal inputs; the outputs come from memory the caching allocator
has just had filled with NaN. One line per case; exits 1 on a mismatch or
an error.

    PYTHONPATH=python scripts/fuzz-ops.py [--cases N] [--seed S]
"""
import argparse
import math
import random
import sys

import torch
import torch.nn.functional as F

import kiln

DEV = "cuda"


def poison():
    x = torch.full((64 << 20,), float("nan"), device=DEV)
    del x


def rel(got, want):
    got, want = got.double(), want.double()
    if not torch.isfinite(got).all():
        return math.inf
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-9)).item()


def grads_rel(y, yd, leaves, leaves_d):
    """The largest rel of the gradients of Σ g·y against float64's."""
    g = torch.randn_like(yd).bfloat16()
    got = torch.autograd.grad(y, leaves, g.to(y.dtype))
    want = torch.autograd.grad(yd, leaves_d, g.double())
    return max(rel(a, b) for a, b in zip(got, want))


def linear(rng):
    m, n, k = (rng.choice([1, 7, 64, rng.randint(1, 1500)]) for _ in range(3))
    act = rng.choice(["none", "relu", "gelu"])
    bias = rng.random() < 0.5
    nk = rng.random() < 0.5  # nn.Linear's (N, K) weight, passed as w.t()
    lead = (2, m) if rng.random() < 0.25 else (m,)  # x (..., K)
    grad = rng.random() < 0.3
    x = torch.randn(*lead, k, device=DEV).bfloat16().requires_grad_(grad)
    w = (torch.randn((n, k) if nk else (k, n), device=DEV) /
         math.sqrt(k)).bfloat16().requires_grad_(grad)
    b = torch.randn(n, device=DEV).bfloat16().requires_grad_(grad) \
        if bias else None
    param = grad and rng.random() < 0.5  # a layer's nn.Parameters
    if param:
        w = torch.nn.Parameter(w.detach())
        b = torch.nn.Parameter(b.detach()) if bias else None
    wt = w.t() if nk else w
    poison()
    y = kiln.linear(x, wt, b, act)
    leaves = [t for t in (x, w, b) if t is not None]
    xd, wd, bd = (t.detach().double().requires_grad_(grad)
                  if t is not None else None for t in (x, w, b))
    want = xd @ (wd.t() if nk else wd) + (bd if bias else 0)
    want = {"none": want, "relu": want.relu(),
            "gelu": F.gelu(want, approximate="tanh")}[act]
    err = rel(y, want)
    if grad:
        err = max(err, grads_rel(y, want, leaves,
                                 [t for t in (xd, wd, bd) if t is not None]))
    return (f"linear x={tuple(x.shape)} N={n} bias={bias} {act} "
            f"{'(N,K)' if nk else '(K,N)'}{' Parameters' if param else ''}"
            f"{' +grad' if grad else ''}",
            err, 3e-2 if grad else 2e-2)


def norm(rng):
    rows = rng.choice([1, 3, rng.randint(1, 5000)])
    cols = rng.choice([2 ** rng.randint(4, 13), rng.randint(1, 6000)])
    grad = rng.random() < 0.5
    shape = rng.choice(["view", "2-D", "3-D"])  # contiguous: the C++ path
    # x and the parameters bf16 or float32 (read as they are), or float32
    # under bf16 autocast (bf16 y).
    types = rng.choice(["bf16", "fp32", "bf16 x fp32 params", "autocast"])
    xt = torch.bfloat16 if types.startswith("bf16") else torch.float32
    pt = torch.bfloat16 if types == "bf16" else torch.float32
    if shape == "view":
        x = torch.randn(rows, cols + 8, device=DEV).to(xt)[:, :cols]
    else:
        x = torch.randn((2, rows, cols) if shape == "3-D" else (rows, cols),
                        device=DEV).to(xt)
    x.requires_grad_(grad)
    param = grad and rng.random() < 0.5  # a layer's nn.Parameters
    w, b = (torch.randn(cols, device=DEV).to(pt).requires_grad_(grad)
            for _ in range(2))
    if param:
        w, b = torch.nn.Parameter(w.detach()), torch.nn.Parameter(b.detach())
    # A tenth of the draws without the weight, a tenth without the bias
    # (nn.RMSNorm / nn.LayerNorm without elementwise_affine or bias).
    if rng.random() < 0.1:
        w = None
    if rng.random() < 0.1:
        b = None
    xd, wd, bd = (t.detach().double().requires_grad_(grad)
                  if t is not None else None for t in (x, w, b))
    poison()
    with torch.autocast("cuda", dtype=torch.bfloat16,
                        enabled=types == "autocast"):
        if rng.random() < 0.5:
            y = kiln.rms_norm(x, w)
            name = "rms_norm"
        else:
            y = kiln.layer_norm(x, w, b)
            name = "layer_norm"
    if y.dtype != (torch.bfloat16 if types == "autocast" else xt):
        raise AssertionError(f"{name} {types}: y has dtype {y.dtype}")
    if name == "rms_norm":
        want = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6)
        want = want * wd if wd is not None else want
        leaves, leaves_d = (x, w), (xd, wd)
    else:
        want = F.layer_norm(xd, (cols,), wd, bd, 1e-5)
        leaves, leaves_d = (x, w, b), (xd, wd, bd)
    err = rel(y, want)
    if grad:
        err = max(err, grads_rel(y, want, [t for t in leaves if t is not None],
                                 [t for t in leaves_d if t is not None]))
    absent = "".join(f" no {n}" for n, t in (("weight", w), ("bias", b))
                     if t is None and (n == "weight" or name == "layer_norm"))
    return (f"{name} x={tuple(x.shape)} {shape} {types}"
            f"{' Parameters' if param else ''}{absent}"
            f"{' +grad' if grad else ''}", err, 3e-2 if grad else 2e-2)


def rotary(rng):
    b, h = rng.randint(1, 3), rng.randint(1, 5)
    n = rng.choice([1, 2, rng.randint(1, 1200)])
    d = 2 ** rng.randint(4, 8)
    layout = rng.choice(["bshd", "bhsd"])
    p = n + rng.randint(0, 300)
    ang = torch.arange(p, device=DEV, dtype=torch.float64)[:, None] * (
        10000.0 ** (-torch.arange(0, d, 2, device=DEV, dtype=torch.float64) / d))
    cos, sin = ang.cos().float(), ang.sin().float()
    pos = torch.randperm(p, device=DEV)[:n] if rng.random() < 0.5 else None
    # Half the time x is the other layout's tensor transposed (not contiguous).
    if rng.random() < 0.5:
        x = torch.randn(b, h, n, d, device=DEV).bfloat16()
        x = x.transpose(1, 2) if layout == "bshd" else x
    else:
        x = torch.randn(b, n, h, d, device=DEV).bfloat16()
        x = x if layout == "bshd" else x.transpose(1, 2)
    x.requires_grad_()
    at = pos if pos is not None else torch.arange(n, device=DEV)
    c, s = cos.double()[at], sin.double()[at]
    c, s = (c[None, :, None], s[None, :, None]) if layout == "bshd" else (
        c[None, None], s[None, None])

    def ref(t):
        t1, t2 = t.chunk(2, -1)
        return torch.cat((t1 * c - t2 * s, t2 * c + t1 * s), -1)

    poison()
    y = kiln.rotary(x, cos, sin, pos, layout=layout)
    g = torch.randn_like(y)
    (dx,) = torch.autograd.grad(y, x, g)
    xd = x.detach().double().requires_grad_()
    (want_dx,) = torch.autograd.grad(ref(xd), xd, g.double())
    err = max(rel(y, ref(x.detach().double())), rel(dx, want_dx))
    return (f"rotary B={b} H={h} N={n} D={d} {layout} positions="
            f"{pos is not None} x-contiguous={x.is_contiguous()}"), err, 2e-2


def cross_entropy(rng):
    r = rng.choice([1, 2, rng.randint(1, 2000)])
    v = rng.choice([2, 17, 1000, 32000, 50257, rng.randint(2, 70000)])
    pad = rng.choice([0, 0, 3, 64])
    logits = (3 * torch.randn(r, v + pad, device=DEV)).bfloat16()[:, :v]
    labels = torch.randint(0, v, (r,), device=DEV)
    labels[0] = v - 1
    if r > 2:
        labels[1::5] = -100
    reduction = rng.choice(["mean", "sum", "none"])
    logits.requires_grad_()
    poison()
    loss = kiln.cross_entropy(logits, labels, reduction=reduction)
    ld = logits.detach().double().requires_grad_()
    want = F.cross_entropy(ld, labels, reduction=reduction)
    g = torch.randn_like(want) if reduction == "none" else torch.ones_like(want)
    (dl,) = torch.autograd.grad(loss, logits, g.float())
    (wl,) = torch.autograd.grad(want, ld, g)
    err = max(rel(loss, want), rel(dl, wl))
    return (f"cross_entropy R={r} V={v} row pad={pad} {reduction}"), err, 2e-2


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=80)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("fuzz-ops: no CUDA device: SKIPPED")
        return 0
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    failures = 0
    ops = (linear, norm, rotary, cross_entropy)
    for i in range(args.cases):
        op = ops[i % len(ops)]
        try:
            desc, err, tol = op(rng)
            torch.cuda.synchronize()
            bad = not err <= tol
        except Exception as e:
            desc, err, bad = f"{op.__name__}: {type(e).__name__}: {e}", math.nan, True
        failures += bad
        print(f"{i:4d} {'FAIL' if bad else 'ok'} rel err {err:.2e} | {desc}",
              flush=True)
    print(f"fuzz-ops: {args.cases - failures} of {args.cases} cases ok "
          f"(seed {args.seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
