"""cuBLAS beside kiln's GEMM at bf16 N^3: torch.matmul (C = A·B) and
torch._addmm_activation(bias, A, B, use_gelu=True) (cuBLASLt's fused
bias + GELU epilogue, GELU's tanh form), on standard normal inputs, each timed
as the median of 30 samples of CUDA events around 10 back-to-back calls
(kiln.bench's bench_ms). Run in the same device session as
`kiln bench gemm [--bias --activation gelu]`, whose rows it prints beside.

Usage: python3 scripts/gemm_peers.py [--sizes 4096,8192 | --mnk 8192x50264x768,...]
"""
import argparse, os, sys
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kiln.bench import bench_ms  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--sizes", default="4096,8192")
p.add_argument("--mnk", default="", help="MxNxK,... (as kiln bench gemm --mnk)")
args = p.parse_args()
problems = ([tuple(int(d) for d in x.split("x")) for x in args.mnk.split(",")] if args.mnk
            else [(int(x),) * 3 for x in args.sizes.split(",")])
dev = torch.device("cuda")
print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}")
print("peer,n,ms,tflops")
for m, n, k in problems:
    g = torch.Generator(device=dev).manual_seed(n)
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16, generator=g)
    size = str(n) if m == n == k else f"{m}x{n}x{k}"
    bias = torch.randn(n, device=dev, dtype=torch.bfloat16, generator=g)
    for name, fn in (("cublas_matmul", lambda: a @ b),
                     ("cublaslt_bias_gelu",
                      lambda: torch._addmm_activation(bias, a, b, use_gelu=True))):
        ms = bench_ms(fn)
        print(f"{name},{size},{ms:.3f},{2 * m * n * k / ms / 1e9:.1f}", flush=True)
