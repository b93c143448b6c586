"""Session 62: kiln's norms under bf16 autocast reading float32 x and
parameters as they are, against the cast each call took before (x cast to
bf16 by a kernel, then the bf16 norm; the parameters' casts cached, out of
the count) and against torch's F.layer_norm / F.rms_norm under autocast
(float32 in and out). GPU time: CUDA events around 10 back-to-back calls,
median of 30, the three in turn (kiln.bench's timing); forward, and forward
+ backward (autograd.grad of y against a fixed dy). Host time: perf_counter
over 2000 calls on 16 rows. Standard normal inputs.

    python3 docs/experiments/2026-11-29-session62-norms.py
"""
import time

import torch
import torch.nn.functional as F

import kiln
from kiln.bench import bench_interleaved_ms

dev = torch.device("cuda")
torch.manual_seed(0)


def host_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return t


for kind in ("layer_norm", "rms_norm"):
    for rows, cols in ((16384, 768), (16384, 4096), (16, 768)):
        x = torch.randn(rows, cols, device=dev, requires_grad=True)
        w = torch.nn.Parameter(torch.randn(cols, device=dev))
        b = torch.nn.Parameter(torch.randn(cols, device=dev))
        ps = (w, b) if kind == "layer_norm" else (w,)
        pb = tuple(p.detach().bfloat16().requires_grad_() for p in ps)
        fn = getattr(kiln, kind)
        tf = ((lambda x, *p: F.layer_norm(x, (cols,), *p, 1e-5))
              if kind == "layer_norm" else
              (lambda x, *p: F.rms_norm(x, (cols,), p[0], 1e-6)))
        dy = torch.randn(rows, cols, device=dev).bfloat16()

        def fwd(call):
            def run():
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    return call()
            return run

        calls = {
            "kiln fp32 read": lambda: fn(x, *ps),
            "kiln cast+bf16": lambda: fn(x.bfloat16(), *pb),
            "torch": lambda: tf(x, *ps),
        }
        out = {}
        with torch.no_grad():
            f = bench_interleaved_ms({n: fwd(c) for n, c in calls.items()})
        for n, c in calls.items():
            out[n] = [f[n]]

        def both(call):
            def run():
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    y = call()
                return torch.autograd.grad(y, (x,) + ps, dy.to(y.dtype),
                                           allow_unused=True)
            return run

        fb = bench_interleaved_ms({n: both(c) for n, c in calls.items()})
        for n in calls:
            out[n].append(fb[n])
        if rows == 16:
            with torch.no_grad():
                for n, c in calls.items():
                    out[n] = [host_us(fwd(c))]
            for n, c in calls.items():
                out[n].append(host_us(both(c), 500))
            unit = "us host"
        else:
            unit = "ms GPU"
        print(f"{kind} {rows}x{cols} ({unit}: forward, forward+backward): " +
              "; ".join(f"{n} {a:.4f} {b:.4f}" for n, (a, b) in out.items()))
