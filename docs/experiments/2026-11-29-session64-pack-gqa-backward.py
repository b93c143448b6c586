"""Grouped-query attention's backward, non-causal, short queries: kiln's
forward and backward (torch.autograd.grad) on k and v of Hk heads as the
build runs them, against the same problem packed by hand (q's G = H / Hk
heads of each k/v head as G rows of one head: q.reshape(B, Hk, G * Nq, D)).
At b71ce6e the C API packs the forward only, so the two differ in the
backward. Same tensors, one process, samples in turn; GPU time (the calls
queued behind torch.cuda._sleep) and wall time (us per step).

    PYTHONPATH=python python3 docs/experiments/2026-11-29-session64-pack-gqa-backward.py
"""
import sys

import torch

import kiln

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from importlib import import_module  # noqa: E402

pack = import_module("2026-11-29-session64-pack-gqa")


def step(q, k, v, do, packed):
    B, H, Nq, D = q.shape
    Hk = k.shape[1]
    if packed:
        o = kiln.attention(q.reshape(B, Hk, H // Hk * Nq, D), k, v).view(B, H, Nq, D)
    else:
        o = kiln.attention(q, k, v)
    return torch.autograd.grad(o, (q, k, v), do)


def row(B, H, Hk, Nq, Nk, D):
    q = torch.randn(B, H, Nq, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(B, Hk, Nk, D, device="cuda", dtype=torch.bfloat16,
                        requires_grad=True) for _ in range(2))
    do = torch.randn_like(q)
    a, b = step(q, k, v, do, False), step(q, k, v, do, True)
    diff = max((x.float() - y.float()).abs().max().item() for x, y in zip(a, b))
    return pack.compare(lambda: step(q, k, v, do, False),
                        lambda: step(q, k, v, do, True), diff)


def main():
    pack.header("max_abs_diff_grads")
    shapes = [(b, 32, 8, nq, nk, 128) for b in (4, 16) for nq in (1, 16, 64, 100)
              for nk in (1024, 4096)]
    shapes += [(16, 32, 8, nq, 4096, 64) for nq in (1, 16, 64)]
    shapes += [(16, 32, hk, 16, 4096, 128) for hk in (1, 2, 16)]
    shapes += [(4, 32, 8, nq, 2048, 128) for nq in (128, 256)]
    for shape in shapes:
        print(",".join(map(str, shape)) + "," + row(*shape), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
