"""Grouped-query decoding: kiln.attention on k and v of Hk heads as it is,
against the same problem packed, q's G = H / Hk heads of each k/v head seen
as G rows of one head (q.view(B, Hk, G * Nq, D): exact for non-causal
attention, one program's rows reading its k/v once), and SDPA's flash and
cuDNN backends with enable_gqa. Same tensors, one process, samples in turn
(kiln.bench's bench_interleaved_ms). Written in session 63, run in session 64: it
decided that the C API packs grouped heads for short queries (9cd9ea7).

    PYTHONPATH=python python3 docs/experiments/2026-11-29-session63-decode-gqa.py
"""
import torch

import kiln
from kiln.bench import PEERS, bench_interleaved_ms


def packed(q, k, v):
    """kiln on q's heads of one k/v head as rows of one head (bhsd q
    contiguous: the G heads' rows are adjacent), O back in q's shape."""
    B, H, Nq, D = q.shape
    Hk = k.shape[1]
    o = kiln.attention(q.reshape(B, Hk, H // Hk * Nq, D), k, v)
    return o.view(B, H, Nq, D)


def main():
    torch.manual_seed(0)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("B,H,Hk,Nq,Nk,D,us_kiln,us_kiln_packed,us_sdpa_flash,us_sdpa_cudnn,"
          "packed_max_abs_diff")
    shapes = [(b, 32, 8, nq, nk, 128) for b in (1, 16, 64) for nq in (1, 4)
              for nk in (1024, 8192, 32768)]
    shapes += [(16, 32, 4, 1, 8192, 128), (16, 64, 8, 1, 8192, 128),
               (16, 32, 8, 1, 8192, 64), (16, 32, 1, 1, 8192, 128)]
    for shape in shapes:
        B, H, Hk, Nq, Nk, D = shape
        if B * Hk * Nk * D * 2 * 2 <= 16 << 30:  # k and v within 16 GiB
            print(",".join(map(str, shape)) + "," + row(*shape), flush=True)
            torch.cuda.empty_cache()


def row(B, H, Hk, Nq, Nk, D):
    q = torch.randn(B, H, Nq, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hk, Nk, D, device="cuda", dtype=torch.bfloat16)
            for _ in range(2))
    diff = (packed(q, k, v).float() - kiln.attention(q, k, v).float()).abs().max().item()
    fns = {"kiln": lambda: kiln.attention(q, k, v),
           "packed": lambda: packed(q, k, v),
           "flash": lambda: PEERS["sdpa_flash"](q, k, v, False),
           "cudnn": lambda: PEERS["sdpa_cudnn"](q, k, v, False)}
    for name, fn in list(fns.items()):
        try:
            fn()
        except Exception as e:  # a peer without this shape
            print(f"# {name} at {(B, H, Hk, Nq, Nk, D)}: {type(e).__name__}: {e}")
            del fns[name]
    ms = bench_interleaved_ms(fns)
    us = lambda n: f"{ms[n] * 1e3:.1f}" if n in ms else "nan"
    return f"{us('kiln')},{us('packed')},{us('flash')},{us('cudnn')},{diff:.2e}"

if __name__ == "__main__":
    main()
