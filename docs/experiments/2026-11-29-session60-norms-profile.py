# Where the row norms' forward + backward time goes: host time a call (CPU wall clock of a
# loop that does not wait), GPU time per kernel (torch.profiler), kiln beside torch's autograd.
import time, torch, kiln
import torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity
torch.manual_seed(0)
print(torch.cuda.get_device_name())
for rows, cols in ((8192, 768), (8192, 4096), (16384, 4096), (4096, 3000)):
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    for kind in ("rms", "layer"):
        fns = {
            "kiln": (lambda: torch.autograd.grad(kiln.rms_norm(x, w), (x, w), g)) if kind == "rms"
            else (lambda: torch.autograd.grad(kiln.layer_norm(x, w, b), (x, w, b), g)),
            "torch": (lambda: torch.autograd.grad(F.rms_norm(x, (cols,), w, 1e-6), (x, w), g))
            if kind == "rms" else
            (lambda: torch.autograd.grad(F.layer_norm(x, (cols,), w, b, 1e-5), (x, w, b), g)),
        }
        for name, fn in fns.items():
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                fn()
            host = (time.perf_counter() - t0) / 20 * 1e6
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    fn()
                torch.cuda.synchronize()
            ks = [(e.key, e.device_time_total / 10) for e in prof.key_averages()
                  if e.device_time_total > 0]
            ks.sort(key=lambda k: -k[1])
            total = sum(t for _, t in ks)
            print(f"{kind} {rows}x{cols} {name}: host {host:.1f} us/call, GPU {total:.1f} us: " +
                  "; ".join(f"{k[:40]} {t:.1f}" for k, t in ks[:6]))
