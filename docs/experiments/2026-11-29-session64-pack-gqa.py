"""Grouped-query attention, non-causal: kiln.attention on k and v of Hk heads
as it is, against the same problem packed (q's G = H / Hk heads of each k/v
head seen as G rows of one head: q.reshape(B, Hk, G * Nq, D), exact for
non-causal attention), from decoding (Nq = 1) through chunks to prefill.
Same tensors, one process, samples in turn. Two times per call:
  wall: CUDA events around 10 back-to-back calls (what an eager caller sees,
        host time included where it exceeds the GPU's);
  gpu:  the same after torch.cuda._sleep has queued them behind a busy GPU,
        so that the events time the kernels alone.
Session 64 decides from it where the C API packs grouped heads.

    PYTHONPATH=python python3 docs/experiments/2026-11-29-session64-pack-gqa.py
"""
import torch

import kiln
from kiln.bench import median


def packed(q, k, v):
    B, H, Nq, D = q.shape
    Hk = k.shape[1]
    return kiln.attention(q.reshape(B, Hk, H // Hk * Nq, D), k, v).view(B, H, Nq, D)


def sample(fn, batch, sleep_cycles):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if sleep_cycles:
        torch.cuda._sleep(sleep_cycles)
    s.record()
    for _ in range(batch):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / batch * 1e3


def times(fns, reps=20, batch=10):
    for fn in fns.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    out = {}
    for mode, cycles in (("wall", 0), ("gpu", 20_000_000)):
        t = {n: [] for n in fns}
        for r in range(reps):
            for n in (fns if r % 2 == 0 else list(reversed(fns))):
                t[n].append(sample(fns[n], batch, cycles))
        out[mode] = {n: median(x) for n, x in t.items()}
    return out


def row(B, H, Hk, Nq, Nk, D):
    q = torch.randn(B, H, Nq, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hk, Nk, D, device="cuda", dtype=torch.bfloat16)
            for _ in range(2))
    diff = (packed(q, k, v).float() - kiln.attention(q, k, v).float()).abs().max().item()
    return compare(lambda: kiln.attention(q, k, v), lambda: packed(q, k, v), diff)


def compare(as_is, packed, diff):
    """The row's columns after B..D: times of both, their GPU ratio, diff."""
    t = times({"kiln": as_is, "packed": packed})
    w, g = t["wall"], t["gpu"]
    return (f"{w['kiln']:.1f},{w['packed']:.1f},{g['kiln']:.1f},{g['packed']:.1f},"
            f"{g['kiln'] / g['packed']:.3f},{diff:.1e}")


def header(diff_column):
    torch.manual_seed(0)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("B,H,Hk,Nq,Nk,D,wall_kiln,wall_packed,gpu_kiln,gpu_packed,"
          f"gpu_kiln/packed,{diff_column}")


def main():
    header("max_abs_diff")
    shapes = [(b, 32, 8, nq, nk, 128) for b in (1, 4, 16, 64) for nq in (1, 4)
              for nk in (512, 2048, 8192, 32768)]
    shapes += [(16, 32, hk, 1, 8192, 128) for hk in (1, 2, 4, 16)]
    shapes += [(16, 32, 8, 1, 8192, 64), (16, 32, 8, 1, 1000, 128), (16, 32, 8, 1, 4097, 128)]
    shapes += [(16, 32, 8, nq, 8192, 128) for nq in (8, 16, 32, 64, 128, 256)]
    shapes += [(16384 // n, 16, 4, n, n, 128) for n in (1000, 2048, 2049, 4096, 4097)]
    shapes += [(16384 // n, 32, 8, n, n, 64) for n in (1000, 2048, 2049, 4096, 4097)]
    for shape in shapes:
        B, H, Hk, Nq, Nk, D = shape
        if B * Hk * Nk * D * 2 * 2 <= 16 << 30:
            print(",".join(map(str, shape)) + "," + row(*shape), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
