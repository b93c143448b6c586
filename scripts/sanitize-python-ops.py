#!/usr/bin/env python3
"""kiln's Python ops once each at ragged sizes, checked against torch.

Meant to run under compute-sanitizer (scripts/sanitize-kernels.sh --python
does: a first run without it tunes and fills the caches, so that the
sanitized run launches only the kernels a user's call would). Covers what
`kiln run` does not: RMSNorm, LayerNorm, rotary, cross-entropy and linear
with a bias and GELU (each forward and backward),
attention_qkvpacked and attention through autograd, deterministic dQ,
decoding (few queries on many keys). Exits 1 if a result is off.
"""
import math
import sys

import torch

import kiln

DEV = "cuda"
failed = []


def check(name, got, want, tol=2e-2):
    got, want = got.double(), want.double()
    err = ((got - want).abs().max() / want.abs().max().clamp_min(1e-9)).item()
    ok = math.isfinite(err) and err < tol
    print(f"{name}: rel err {err:.2e} {'ok' if ok else 'FAIL'}", flush=True)
    if not ok:
        failed.append(name)


def norms():
    x = torch.randn(3, 77, 1024, device=DEV).bfloat16()
    w, b = (torch.randn(1024, device=DEV).bfloat16() for _ in range(2))
    xd, wd, bd = x.double(), w.double(), b.double()
    check("rms_norm", kiln.rms_norm(x, w),
          xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * wd)
    check("layer_norm", kiln.layer_norm(x, w, b),
          torch.nn.functional.layer_norm(xd, (1024,), wd, bd, 1e-5))
    # The gradients at a row length that is not a power of two (masked
    # columns), 231 rows over the backward's programs.
    x, w, b = (t[..., :300].contiguous().requires_grad_() for t in (x, w, b))
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
    g = torch.randn_like(x)
    got = torch.autograd.grad(kiln.layer_norm(x, w, b), (x, w, b), g)
    want = torch.autograd.grad(
        torch.nn.functional.layer_norm(xd, (300,), wd, bd, 1e-5), (xd, wd, bd),
        g.double())
    for name, a, r in zip(("dx", "dw", "db"), got, want):
        check(f"layer_norm backward {name}", a, r)
    got = torch.autograd.grad(kiln.rms_norm(x, w), (x, w), g)
    want = torch.autograd.grad(
        xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * wd,
        (xd, wd), g.double())
    for name, a, r in zip(("dx", "dw"), got, want):
        check(f"rms_norm backward {name}", a, r)


def rotary():
    n, d = 1001, 128
    x = torch.randn(2, n, 3, d, device=DEV).bfloat16().requires_grad_()
    ang = torch.arange(4096, device=DEV, dtype=torch.float64)[:, None] * (
        10000.0 ** (-torch.arange(0, d, 2, device=DEV, dtype=torch.float64) / d))
    cos, sin = ang.cos().float(), ang.sin().float()
    pos = torch.randperm(4096, device=DEV)[:n]

    def ref(t):
        c, s = cos.double()[pos][None, :, None], sin.double()[pos][None, :, None]
        t1, t2 = t.chunk(2, -1)
        return torch.cat((t1 * c - t2 * s, t2 * c + t1 * s), -1)

    y = kiln.rotary(x, cos, sin, pos)
    check("rotary", y, ref(x.double()))
    g = torch.randn_like(y)
    (dx,) = torch.autograd.grad(y, x, g)
    xd = x.detach().double().requires_grad_()
    (want,) = torch.autograd.grad(ref(xd), xd, g.double())
    check("rotary backward", dx, want)


def cross_entropy():
    logits = (3 * torch.randn(333, 32003, device=DEV)).bfloat16().requires_grad_()
    labels = torch.randint(0, 32003, (333,), device=DEV)
    labels[::7] = -100
    loss = kiln.cross_entropy(logits, labels, reduction="none")
    ld = logits.detach().double().requires_grad_()
    want = torch.nn.functional.cross_entropy(ld, labels, reduction="none")
    check("cross_entropy", loss, want)
    g = torch.randn_like(loss)
    (dl,) = torch.autograd.grad(loss, logits, g)
    (wl,) = torch.autograd.grad(want, ld, g.double())
    check("cross_entropy backward", dl, wl)


def linear():
    x = torch.randn(1000, 300, device=DEV).bfloat16()
    w = (torch.randn(300, 777, device=DEV) / 17).bfloat16()
    b = torch.randn(777, device=DEV).bfloat16()
    want = torch.nn.functional.gelu(x.double() @ w.double() + b.double(),
                                    approximate="tanh")
    check("linear gelu", kiln.linear(x, w, b, "gelu"), want)
    # With a gradient (the forward also writes Z; dX, dW by GEMMs reading
    # operands as stored), an nn.Linear weight and x of three dimensions.
    x = torch.randn(2, 500, 768, device=DEV).bfloat16().requires_grad_()
    w = (torch.randn(1024, 768, device=DEV) / 28).bfloat16().requires_grad_()
    b = torch.randn(1024, device=DEV).bfloat16().requires_grad_()
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
    y = kiln.linear(x, w.t(), b, "gelu")
    yd = torch.nn.functional.gelu(xd @ wd.t() + bd, approximate="tanh")
    check("linear gelu (B, S, K)", y, yd)
    g = torch.randn_like(y)
    got = torch.autograd.grad(y, (x, w, b), g)
    want = torch.autograd.grad(yd, (xd, wd, bd), g.double())
    for name, a, r in zip(("dx", "dw", "db"), got, want):
        check(f"linear backward {name}", a, r)


def reference(q, k, v, causal):
    q, k, v = (t.double() for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).tril().logical_not(),
                          float("-inf"))
    return torch.softmax(s, -1) @ v


def attention():
    qkv = torch.randn(2, 1001, 3, 2, 64, device=DEV).bfloat16()
    o = kiln.attention_qkvpacked(qkv, causal=True)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    check("attention_qkvpacked", o.transpose(1, 2), reference(q, k, v, True))
    # Decoding: 3 queries on 5003 keys (split keys or small tiles).
    q = torch.randn(2, 4, 3, 128, device=DEV).bfloat16()
    k, v = (torch.randn(2, 4, 5003, 128, device=DEV).bfloat16() for _ in range(2))
    check("attention decoding", kiln.attention(q, k, v), reference(q, k, v, False))
    # V a view at an odd offset (its own loads; Q and K by TMA), causal D=128:
    # the dead-row skip's named barriers.
    k, v = (torch.randn(1, 2, 1001, 128, device=DEV).bfloat16() for _ in range(2))
    q = torch.randn(1, 2, 1001, 128, device=DEV).bfloat16()
    buf = torch.empty(1 + v.numel(), device=DEV, dtype=v.dtype)
    vo = buf[1:].view(v.shape)
    vo.copy_(v)
    check("attention V unaligned", kiln.attention(q, k, vo, causal=True),
          reference(q, k, v, True))
    # Forward and backward through autograd, dQ by atomics and deterministic.
    q, k, v = (torch.randn(1, 3, 777, 128, device=DEV).bfloat16().requires_grad_()
               for _ in range(3))
    g = torch.randn(1, 3, 777, 128, device=DEV).bfloat16()
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(reference(qd, kd, vd, True), (qd, kd, vd), g.double())
    for det in (False, True):
        torch.use_deterministic_algorithms(det)
        o = kiln.attention(q, k, v, causal=True)
        grads = torch.autograd.grad(o, (q, k, v), g)
        torch.use_deterministic_algorithms(False)
        for name, got, w in zip(("dq", "dk", "dv"), grads, want):
            check(f"attention backward {name} deterministic={det}", got, w, 5e-2)


def main():
    if not torch.cuda.is_available():
        print("sanitize-python-ops: no CUDA device: SKIPPED")
        return 0
    torch.manual_seed(0)
    for part in (norms, rotary, cross_entropy, linear, attention):
        part()
    torch.cuda.synchronize()
    print("sanitize-python-ops:", "FAILED " + ", ".join(failed) if failed else "all ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
