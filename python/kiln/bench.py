"""kiln beside SDPA's flash and cuDNN backends, on the same tensors, in one
process: python3 -m kiln.bench [--quick] [--backward] [--dtype bf16|fp16]
[--seqs N,N,...] [--json FILE].

Inputs are standard normal (torch.randn); each figure is the median over 30
samples of CUDA events around 10 back-to-back calls, divided by 10 (as
peers.py times its peers), so host overhead between calls is hidden the
same way for every peer. --backward times torch.autograd.grad of O with
respect to Q, K and V (the forward done once outside the timing), with
2.5x the forward's FLOPs (the FlashAttention papers' convention). Shapes:
B·N = 16k tokens, H·D = 2048, the peers.py shapes, plus ragged N.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import kiln

STANDARD = (512, 1024, 2048, 4096, 8192, 16384)
RAGGED = (1000, 3001, 4097)


def bench_ms(fn, warm=5, reps=30, batch=10):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(batch):
            fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / batch)
    times.sort()
    return times[len(times) // 2]


def sdpa(backend):
    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


PEERS = {
    "kiln": lambda q, k, v, causal: kiln.attention(q, k, v, causal=causal),
    "sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION),
    "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
}


def host_overhead_us(q, k, v):
    """Host microseconds per kiln.attention call, the kernel fetched once:
    the call itself (checks, allocation, launch), the GPU not waited on."""
    torch.cuda.synchronize()
    per = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(50):
            kiln.attention(q, k, v)
        per.append((time.perf_counter() - t0) / 50 * 1e6)
        torch.cuda.synchronize()
    return sorted(per)[2]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m kiln.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="N in 1024, 4096 and the ragged 1000, 4097")
    p.add_argument("--backward", action="store_true")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--seqs", default="", help="comma-separated N (default: standard and ragged)")
    p.add_argument("--heads-dims", default="32x64,16x128", help="HxD pairs")
    p.add_argument("--json", default="", help="also write the rows here")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("kiln.bench: no CUDA GPU", file=sys.stderr)
        return 2
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    seqs = ([int(x) for x in a.seqs.split(",")] if a.seqs else
            (1000, 1024, 4096, 4097) if a.quick else sorted(STANDARD + RAGGED))
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    print(f"# {props.name}, torch {torch.__version__}, kiln {kiln.version()}, "
          f"{a.dtype}, {'backward' if a.backward else 'forward'}")
    rows = []
    print("D,causal,N,B,H," + ",".join(f"{p}_tflops" for p in PEERS) +
          ",kiln/flash,kiln/cudnn")
    for hd in a.heads_dims.split(","):
        H, D = (int(x) for x in hd.split("x"))
        for causal in (False, True):
            for N in seqs:
                B = max(1, 16384 // N)
                g = torch.Generator(device=dev).manual_seed(N + D)
                q, k, v = (torch.randn(B, H, N, D, device=dev, dtype=dtype, generator=g)
                           for _ in range(3))
                flops = 4 * B * H * N * N * D * (0.5 if causal else 1) * (2.5 if a.backward else 1)
                tf = {}
                for name, fn in PEERS.items():
                    try:
                        if a.backward:
                            qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
                            out = fn(qg, kg, vg, causal)
                            dout = torch.randn_like(out)
                            ms = bench_ms(lambda: torch.autograd.grad(
                                out, (qg, kg, vg), dout, retain_graph=True))
                            del out, dout, qg, kg, vg
                        else:
                            ms = bench_ms(lambda: fn(q, k, v, causal))
                        tf[name] = flops / ms / 1e9
                    except Exception as e:  # a peer without this shape
                        print(f"# {name} N={N} D={D} causal={causal}: "
                              f"{type(e).__name__}: {str(e)[:120]}")
                        tf[name] = float("nan")
                    torch.cuda.empty_cache()
                r = dict(D=D, causal=causal, N=N, B=B, H=H, dtype=a.dtype,
                         backward=a.backward, **{f"{n}_tflops": t for n, t in tf.items()})
                rows.append(r)
                ratio = lambda p: tf["kiln"] / tf[p] if tf[p] > 0 else float("nan")
                print(f"{D},{int(causal)},{N},{B},{H}," +
                      ",".join(f"{tf[n]:.0f}" for n in PEERS) +
                      f",{ratio('sdpa_flash'):.2f},{ratio('sdpa_cudnn'):.2f}", flush=True)
                del q, k, v
    q, k, v = (torch.randn(1, 16, 1024, 128, device=dev, dtype=dtype) for _ in range(3))
    host = host_overhead_us(q, k, v)
    print(f"# host time per kiln.attention call (fetched kernel, 1x16x1024x128): {host:.1f} us")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=props.name, torch=torch.__version__, rows=rows,
                           host_us_per_call=host), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
