"""Session 61: host time per call (perf_counter over 2000 calls on tiny
tensors, the GPU never the bound) of kiln's norms, linear and cross-entropy
beside torch's, and of the pieces of kiln.layer_norm's path.

    python3 docs/experiments/2026-11-29-session61-host.py
"""
import time

import torch
import torch.nn.functional as F

import kiln
from kiln import _cpp, ops

dev = torch.device("cuda")
cpp = _cpp.module()
x = torch.randn(16, 768, device=dev, dtype=torch.bfloat16)
xf = torch.randn(16, 768, device=dev)
w = torch.nn.Parameter(torch.randn(768, device=dev))
b = torch.nn.Parameter(torch.randn(768, device=dev))
wb, bb = w.detach().bfloat16(), b.detach().bfloat16()
lin = torch.nn.Linear(768, 768, device=dev)
wtb = lin.weight.detach().bfloat16().t()
logits = torch.randn(16, 256, device=dev, dtype=torch.bfloat16)
labels = torch.randint(0, 256, (16,), device=dev)


def us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return t


rows = [
    ("empty python call", lambda: None),
    ("torch.empty_like", lambda: torch.empty_like(x)),
    ("F.layer_norm bf16", lambda: F.layer_norm(x, (768,), wb, bb)),
    ("kiln.layer_norm bf16", lambda: kiln.layer_norm(x, wb, bb)),
    ("cpp.row_norm bf16", lambda: cpp.row_norm(1, x, wb, bb, 1e-5)),
    ("ops._autocast_bf16()", ops._autocast_bf16),
    ("ops._traced()", ops._traced),
    ("F.linear bf16", lambda: F.linear(x, wtb.t(), None)),
    ("kiln.linear bf16", lambda: kiln.linear(x, wtb)),
    ("cpp.linear bf16", lambda: cpp.linear(x, wtb, None, 0)),
    ("F.cross_entropy bf16->f32", lambda: F.cross_entropy(logits.float(), labels)),
    ("kiln.cross_entropy", lambda: kiln.cross_entropy(logits, labels)),
]
with torch.no_grad():
    for name, fn in rows:
        print(f"{name:34s} {us(fn):7.2f} us")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for name, fn in [
            ("autocast: F.layer_norm f32 x", lambda: F.layer_norm(xf, (768,), w, b)),
            ("autocast: kiln.layer_norm f32", lambda: kiln.layer_norm(xf, w, b)),
            ("autocast: cpp.autocast_bf16 x,w,b", lambda: cpp.autocast_bf16([xf, w, b])),
            ("autocast: xf.to(bf16)", lambda: xf.to(torch.bfloat16)),
            ("autocast: F.linear f32 params", lambda: lin(x)),
            ("autocast: kiln.linear f32 params",
             lambda: kiln.linear(x, lin.weight.t(), lin.bias)),
        ]:
            print(f"{name:34s} {us(fn):7.2f} us")
# With a gradient: forward + backward host time (tiny tensors, bf16).
xg = x.clone().requires_grad_()
wg, bg = wb.clone().requires_grad_(), bb.clone().requires_grad_()
wtg = lin.weight.detach().bfloat16().requires_grad_()
for name, fn in [
    ("grad: F.layer_norm", lambda: F.layer_norm(xg, (768,), wg, bg).sum().backward()),
    ("grad: kiln.layer_norm", lambda: kiln.layer_norm(xg, wg, bg).sum().backward()),
    ("grad: F.linear", lambda: F.linear(xg, wtg).sum().backward()),
    ("grad: kiln.linear", lambda: kiln.linear(xg, wtg.t()).sum().backward()),
    ("grad: .sum().backward() alone", lambda: (xg * 1).sum().backward()),
]:
    print(f"{name:34s} {us(fn, 500):7.2f} us")
