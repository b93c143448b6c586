# kiln.rotary's host time a call (no synchronize) and time per call back to back, the C++ path
# against the Python path, one process, same tensors.
import time, torch, kiln
from kiln import _cpp
from kiln.bench import bench_interleaved_ms
torch.manual_seed(0)

def host_us(fn):
    torch.cuda.synchronize()
    per = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(50):
            fn()
        per.append((time.perf_counter() - t0) / 50 * 1e6)
        torch.cuda.synchronize()
    return sorted(per)[3]

real = _cpp.module
inv = torch.arange(0, 128, 2, device="cuda", dtype=torch.float64) / 128
ang = torch.arange(8192, device="cuda", dtype=torch.float64)[:, None] * 10000.0 ** (-inv)
cos, sin = ang.cos().float().contiguous(), ang.sin().float().contiguous()
print("B,N,H,D,grad,host_us_cpp,host_us_python,us_cpp,us_python")
for (B, N, H, D, grad) in ((1, 1, 32, 128, False), (8, 1, 32, 128, False), (8, 2048, 32, 128, False),
                           (4, 512, 32, 128, True)):
    x = torch.randn(B, N, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
    g = torch.randn(B, N, H, D, device="cuda", dtype=torch.bfloat16)
    if grad:
        f = lambda: torch.autograd.grad(kiln.rotary(x, cos, sin), x, g)
    else:
        f = lambda: kiln.rotary(x, cos, sin)
    f()
    hc = host_us(f)
    _cpp.module = lambda: None
    f()
    hp = host_us(f)
    _cpp.module = real
    def fp():
        _cpp.module = lambda: None
        try:
            return f()
        finally:
            _cpp.module = real
    r = bench_interleaved_ms({"c": f, "p": fp}, reps=30)
    print(f"{B},{N},{H},{D},{int(grad)},{hc:.1f},{hp:.1f},{r['c']*1e3:.1f},{r['p']*1e3:.1f}")
