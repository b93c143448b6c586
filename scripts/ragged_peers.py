"""SDPA's flash and cuDNN attention at the sequence lengths of `kiln bench
attention --ragged`, timed as ../shared/bench/peers.py times them (standard
normal inputs, the median of 30 samples of CUDA events around 10 back-to-back
calls, divided by 10), beside kiln's rows from that benchmark's --json.

Usage: python3 scripts/ragged_peers.py --kiln kiln.json [--dtypes bf16] [--backward]
(kiln rows of `--shapes both` are tabled per mode: static, runtime)
--backward: kiln's rows of `kiln bench attention --backward --json`, and SDPA's
backward timed as peers.py --backward times it (torch.autograd.grad of the
output given a standard normal dO, the forward once outside the timing);
TFLOP/s count 2.5x the forward's FLOPs.
Prints one CSV row per shape and peer, then the table: each N with SDPA's
figures, kiln's, kiln/cuDNN and, for N not a multiple of 128, kiln at N over
kiln at the nearest multiple of 128.
"""
import argparse, json, os, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

P = argparse.ArgumentParser()
P.add_argument("--kiln", required=True, help="kiln bench attention --json output")
P.add_argument("--dtypes", default="bf16")
P.add_argument("--batch", type=int, default=10)
P.add_argument("--backward", action="store_true")
args = P.parse_args()
dev = torch.device("cuda")
print(f"# device {torch.cuda.get_device_name(0)} torch={torch.__version__}")


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kiln.bench import bench_ms  # noqa: E402  (the one timing loop)


def bench(fn):
    return bench_ms(fn, batch=args.batch)


rows = [r for r in json.load(open(args.kiln))["rows"]
        if (r.get("pass", "forward") == "backward") == args.backward]
modes = sorted({r.get("shapes", "default") for r in rows})
kiln = {(r["dtype"], r["N"], r["D"], r["causal"], r.get("shapes", "default")): r["tflops"]
        for r in rows}
peers = {}
print("peer,dtype,B,H,N,D,causal,ms,tflops")
for (dn, N, D, causal) in sorted({k[:4] for k in kiln}):
    if dn not in args.dtypes.split(","):
        continue
    dtype = torch.bfloat16 if dn == "bf16" else torch.float16
    B, H = max(1, 16384 // N), 2048 // D
    g = torch.Generator(device=dev).manual_seed(N + D)
    q, k, v = (torch.randn(B, H, N, D, device=dev, dtype=dtype, generator=g) for _ in range(3))
    flops = 4 * B * H * N * N * D * (0.5 if causal else 1.0) * (2.5 if args.backward else 1.0)
    for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION),
                          ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
        def run():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        try:
            if args.backward:
                qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                dout = torch.randn_like(out)
                ms = bench(lambda: torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True))
                del out, dout, qg, kg, vg
            else:
                ms = bench(run)
        except Exception as e:  # noqa: a backend may refuse a shape
            print(f"# {name} {N} {D} {causal} failed: {type(e).__name__}: {str(e)[:120]}")
            continue
        peers[(name, dn, N, D, causal)] = flops / ms / 1e9
        print(f"{name},{dn},{B},{H},{N},{D},{int(causal)},{ms:.3f},{flops / ms / 1e9:.1f}", flush=True)
    del q, k, v

print(f"\n# {'backward ' if args.backward else ''}TFLOP/s; kiln/cuDNN; for N % 128 != 0, kiln at N / kiln at the nearest multiple of 128"
      + (" (same shapes mode)" if len(modes) > 1 else ""))
print("dtype,D,causal,N,shapes,sdpa_flash,sdpa_cudnn,kiln,kiln/cudnn,kiln/kiln@128")
for (dn, N, D, causal, mode) in sorted(kiln, key=lambda k: (k[0], k[2], k[3], k[1], k[4])):
    if dn not in args.dtypes.split(","):
        continue
    f = peers.get(("sdpa_flash", dn, N, D, causal), float("nan"))
    c = peers.get(("sdpa_cudnn", dn, N, D, causal), float("nan"))
    t = kiln[(dn, N, D, causal, mode)]
    near = (N + 64) // 128 * 128
    ref = kiln.get((dn, near, D, causal, mode)) if N % 128 else None
    print(f"{dn},{D},{int(causal)},{N},{mode},{f:.0f},{c:.0f},{t:.0f},{t / c:.2f},"
          + (f"{t / ref:.2f}" if ref else ""))
