# Decode-shaped kiln.attention: host time per call (no synchronize) and time per call back to
# back, C++-checked path against the Python path and SDPA, one process, same tensors.
import math, time, torch, kiln
from kiln import ops
import torch.nn.functional as F
from kiln import _cpp
from kiln.bench import bench_interleaved_ms, PEERS
torch.manual_seed(0)
print(torch.cuda.get_device_name())
cpp = _cpp.module()

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

class NoCpp:
    def __enter__(self):
        self.m = _cpp.module; _cpp.module = lambda: None
    def __exit__(self, *a):
        _cpp.module = self.m

print("B,H,Nq,Nk,D,causal,host_us_kiln,host_us_kiln_session58_path,host_us_sdpa_default,us_kiln,us_sdpa_default,us_sdpa_cudnn")
for (B, H, Nq, Nk, D, causal) in ((1, 32, 1, 4096, 128, False), (8, 32, 1, 4096, 128, False),
                                  (1, 16, 1, 1000, 64, False), (4, 16, 128, 4096, 128, True)):
    q = torch.randn(B, H, Nq, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, H, Nk, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, H, Nk, D, device="cuda", dtype=torch.bfloat16)
    fk = lambda: kiln.attention(q, k, v, causal=causal)
    fs = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    cud = PEERS["sdpa_cudnn"]
    fc = lambda: cud(q, k, v, causal)
    fk()
    hk = host_us(fk)
    assert cpp.attention_checked(q, k, v, causal, None, False) is not None
    def before():  # session 58's kiln.attention: Python checks, then the C++ launch
        ops._check(q, k, v, causal, None, "bhsd")
        s = 1.0 / math.sqrt(D)
        kk, vv = (ops._aligned_copy("k", k), ops._aligned_copy("v", v)) if ops._eager(q, k, v) else (k, v)
        return cpp.attention(q, kk, vv, causal, s, False)[0]
    hp = host_us(before)
    hs = host_us(fs)
    r = bench_interleaved_ms({"k": fk, "s": fs, "c": fc}, reps=30)
    print(f"{B},{H},{Nq},{Nk},{D},{int(causal)},{hk:.1f},{hp:.1f},{hs:.1f},"
          f"{r['k']*1e3:.1f},{r['s']*1e3:.1f},{r['c']*1e3:.1f}")
