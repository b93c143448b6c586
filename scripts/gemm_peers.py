"""cuBLAS beside kiln's GEMM at bf16 N^3: torch.matmul (C = A·B) and
torch._addmm_activation(bias, A, B, use_gelu=True) (cuBLASLt's fused
bias + GELU epilogue, GELU's tanh form), on standard normal inputs, each timed
as the median of 30 samples of CUDA events around 10 back-to-back calls
(kiln.bench's bench_ms). Run in the same device session as
`kiln bench gemm [--bias --activation gelu]`, whose rows it prints beside.

Usage: python3 scripts/gemm_peers.py [--sizes 4096,8192] [--kiln kiln-gemm.txt ...]
"""
import argparse, os, sys
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kiln.bench import bench_ms  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--sizes", default="4096,8192")
args = p.parse_args()
dev = torch.device("cuda")
print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}")
print("peer,n,ms,tflops")
for n in (int(x) for x in args.sizes.split(",")):
    g = torch.Generator(device=dev).manual_seed(n)
    a, b = (torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(2))
    bias = torch.randn(n, device=dev, dtype=torch.bfloat16, generator=g)
    for name, fn in (("cublas_matmul", lambda: a @ b),
                     ("cublaslt_bias_gelu",
                      lambda: torch._addmm_activation(bias, a, b, use_gelu=True))):
        ms = bench_ms(fn)
        print(f"{name},{n},{ms:.3f},{2 * n**3 / ms / 1e9:.1f}", flush=True)
