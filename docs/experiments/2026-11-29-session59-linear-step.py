# Where a kiln.linear training step's time goes: host per step, GPU kernels per step.
import time, torch, kiln
from torch.profiler import profile, ProfilerActivity
torch.manual_seed(0)
for (M, N, K) in ((8192, 768, 3072), (8192, 3072, 768)):
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    def step_k():
        y = kiln.linear(x, w.t())
        return torch.autograd.grad(y, (x, w), g)
    def step_t():
        y = x @ w.t()
        return torch.autograd.grad(y, (x, w), g)
    for name, fn in (("kiln", step_k), ("torch", step_t)):
        for _ in range(5): fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(50): fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        print(f"{M}x{N}x{K} {name}: host {1e6*(t1-t0)/50:.1f} us/step, with sync {1e6*(t2-t0)/50:.1f} us/step")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10): fn()
            torch.cuda.synchronize()
        for e in sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:6]:
            print(f"   {e.key[:70]:70s} n={e.count:3d} {e.device_time_total/10:.1f} us/step")
