"""Cliff scan: kiln against SDPA cuDNN (and flash) on shapes outside the
peers table: short and ragged N, Nq != Nk, bshd, fp16, backward. Samples in
turn (kiln.bench.bench_interleaved_ms), standard normal inputs."""
import sys, math, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import kiln
from kiln.bench import bench_interleaved_ms

dev = torch.device("cuda")
print("#", torch.cuda.get_device_properties(dev).name)

def sd(backend):
    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run

PEERS = {"kiln": lambda q, k, v, c: kiln.attention(q, k, v, causal=c),
         "cudnn": sd(SDPBackend.CUDNN_ATTENTION),
         "flash": sd(SDPBackend.FLASH_ATTENTION)}

def one(B, H, Nq, Nk, D, causal, bwd=False, dtype=torch.bfloat16, reps=15):
    g = torch.Generator(device=dev).manual_seed(Nq * 7 + Nk + D)
    q = torch.randn(B, H, Nq, D, device=dev, dtype=dtype, generator=g)
    k = torch.randn(B, H, Nk, D, device=dev, dtype=dtype, generator=g)
    v = torch.randn(B, H, Nk, D, device=dev, dtype=dtype, generator=g)
    # useful FLOPs: causal counts the pairs j <= i (top-left aligned)
    pairs = sum(min(i + 1, Nk) for i in range(Nq)) if causal else Nq * Nk
    flops = 4 * B * H * pairs * D * (2.5 if bwd else 1)
    calls = {}
    for name, fn in PEERS.items():
        try:
            if bwd:
                qkv = tuple(t.detach().clone().requires_grad_() for t in (q, k, v))
                out = fn(*qkv, causal)
                do = torch.randn_like(out)
                call = (lambda out=out, qkv=qkv, do=do:
                        torch.autograd.grad(out, qkv, do, retain_graph=True))
            else:
                call = lambda fn=fn: fn(q, k, v, causal)
            call()
            calls[name] = call
        except Exception as e:
            print(f"# {name} B={B} Nq={Nq} Nk={Nk} D={D} c={causal}: {type(e).__name__} {str(e)[:80]}")
    t = bench_interleaved_ms(calls, reps=reps)
    tf = {n: flops / t[n] / 1e9 if n in t else float("nan") for n in PEERS}
    r = tf["kiln"] / tf["cudnn"] if tf["cudnn"] == tf["cudnn"] else float("nan")
    rf = tf["kiln"] / tf["flash"] if tf["flash"] == tf["flash"] else float("nan")
    flag = " <<<" if r < 1.0 or rf < 1.0 else ""
    print(f"{'bwd' if bwd else 'fwd'},{D},{int(causal)},{B},{H},{Nq},{Nk},"
          f"{tf['kiln']:.0f},{tf['cudnn']:.0f},{tf['flash']:.0f},{r:.3f},{rf:.3f}{flag}", flush=True)
    torch.cuda.empty_cache()

print("pass,D,causal,B,H,Nq,Nk,kiln,cudnn,flash,kiln/cudnn,kiln/flash")
which = sys.argv[1] if len(sys.argv) > 1 else "fwd"
HD = ((32, 64), (16, 128))
if which == "fwd":
    for N in (64, 100, 128, 197, 256, 257, 300, 384, 500, 640, 777, 1025, 1500, 2500, 5000, 7000, 12289):
        for H, D in HD:
            for c in (False, True):
                one(max(1, 16384 // N), H, N, N, D, c)
elif which == "cross":
    for Nq, Nk, B in ((1, 4096, 64), (16, 8192, 16), (128, 4096, 16), (512, 4096, 8),
                      (1000, 3001, 5), (4096, 512, 4), (300, 16384, 4)):
        for H, D in HD:
            for c in ((False, True) if Nq <= Nk else (False,)):
                one(B, H, Nq, Nk, D, c)
elif which == "short":
    for N in (64, 128, 129, 192, 200, 257, 300, 320):
        for H, D in HD:
            one(max(1, 16384 // N), H, N, N, D, False)
    for N in (128, 197, 257, 500, 768):
        one(max(1, 16384 // N), 16, N, N, 128, True, bwd=True)
elif which == "bwd":
    for N in (128, 197, 257, 500, 777, 1500, 2500, 6000, 12289):
        for H, D in HD:
            for c in (False, True):
                one(max(1, 16384 // N), H, N, N, D, c, bwd=True)
