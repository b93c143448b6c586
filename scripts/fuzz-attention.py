#!/usr/bin/env python3
"""Random attention problems against an fp32 reference, on a GPU.

Each case draws a shape (B, H, Nq, Nk, D), dtype, layout and causality, and
inputs the way users hand them: contiguous, views into larger buffers (an
odd element offset: pointers not 16-byte aligned; padded rows: strides that
are not multiples of 16 bytes), fresh standard-normal values. kiln's
forward and backward write into outputs poisoned with NaN that sit inside
larger buffers whose guard bands must come back untouched; every element
is checked against torch in fp32. One line per case; exits 1 on any
mismatch, write outside an output, or error.

    PYTHONPATH=python scripts/fuzz-attention.py [--cases N] [--seed S]
"""
import argparse
import math
import random
import sys

import torch

from kiln import _lib
from kiln.ops import _stream

GUARD = 256  # elements of sentinel on each side of an output


def make_input(rng, shape, dtype, bshd, dev):
    """A (B, H, N, D) problem tensor in the given layout, as a view whose
    storage offset and row stride vary."""
    b, h, n, d = shape
    phys = (b, n, h, d) if bshd else (b, h, n, d)
    kind = rng.choice(["contiguous", "contiguous", "offset", "padded"])
    pad = rng.choice([3, 8, 24]) if kind == "padded" else 0
    offset = rng.choice([1, 3, 8]) if kind == "offset" else 0
    rows = math.prod(phys[:-1])
    buf = torch.randn(offset + rows * (d + pad), device=dev).to(dtype)
    t = buf[offset:].view(*phys[:-1], d + pad)[..., :d]
    return t, f"{kind}{pad or offset or ''}"


def guarded(shape, dtype, dev):
    """A NaN-poisoned tensor inside a buffer with sentinel bands."""
    n = math.prod(shape)
    buf = torch.full((n + 2 * GUARD,), -77.0, dtype=dtype, device=dev)
    buf[GUARD:GUARD + n] = float("nan")
    return buf, buf[GUARD:GUARD + n].view(shape)


def bands_intact(buf):
    return bool((buf[:GUARD] == -77.0).all() and (buf[-GUARD:] == -77.0).all())


def rel_err(x, ref):
    x, ref = x.float(), ref.float()
    if not torch.isfinite(x).all():
        return math.inf
    return ((x - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()


def reference(q, k, v, do, causal, scale, bshd):
    """O, LSE and the gradients in fp32 (bhsd tensors)."""
    t = [x.float().transpose(1, 2) if bshd else x.float() for x in (q, k, v)]
    q32, k32, v32 = (x.detach().requires_grad_() for x in t)
    s = (q32 @ k32.transpose(-1, -2)) * scale
    if causal:
        nq, nk = s.shape[-2:]
        keep = torch.ones(nq, nk, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = torch.softmax(s, -1) @ v32
    g = do.float().transpose(1, 2) if bshd else do.float()
    dq, dk, dv = torch.autograd.grad(o, (q32, k32, v32), g)
    back = (lambda x: x.transpose(1, 2)) if bshd else (lambda x: x)
    return back(o), lse, back(dq), back(dk), back(dv)


def draw_length(rng):
    return rng.choice([1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 255,
                       rng.randint(1, 600), rng.randint(600, 2200)])


def draw_case(rng):
    dtype = rng.choice([torch.bfloat16, torch.float16])
    d = rng.choice([64, 128])
    bshd = rng.random() < 0.5
    causal = rng.random() < 0.5
    b, h = rng.randint(1, 3), rng.randint(1, 4)
    nq = draw_length(rng)
    nk = nq if rng.random() < 0.5 else draw_length(rng)
    scale = 1.0 / math.sqrt(d) if rng.random() < 0.7 else rng.uniform(0.02, 0.3)
    return dtype, d, bshd, causal, b, h, nq, nk, scale


def run_case(rng, case, dev):
    dtype, d, bshd, causal, b, h, nq, nk, scale = case
    q, qk = make_input(rng, (b, h, nq, d), dtype, bshd, dev)
    k, kk = make_input(rng, (b, h, nk, d), dtype, bshd, dev)
    v, vk = make_input(rng, (b, h, nk, d), dtype, bshd, dev)
    do, _ = make_input(rng, (b, h, nq, d), dtype, bshd, dev)
    desc = (f"B={b} H={h} Nq={nq} Nk={nk} D={d} {str(dtype)[6:]} "
            f"{'bshd' if bshd else 'bhsd'} {'causal' if causal else 'full'} "
            f"scale={scale:.3g} q:{qk} k:{kk} v:{vk}")
    oshape = (b, nq, h, d) if bshd else (b, h, nq, d)
    obuf, o = guarded(oshape, dtype, dev)
    lbuf, lse = guarded((b, h, nq), torch.float32, dev)
    n = _lib.forward_workspace(q, k, causal, scale, bshd)
    ws = torch.full((n,), float("nan"), device=dev) if n else None
    _lib.forward(q, k, v, o, lse, ws, causal, scale, bshd, _stream(q))
    bufs = [obuf, lbuf]
    grads = [guarded(t.shape, dtype, dev) for t in (q, k, v)]
    bufs += [g[0] for g in grads]
    bws = torch.full((_lib.workspace_elements(b, h, nq, d),), float("nan"),
                     device=dev)
    _lib.backward(q, k, v, o, do, lse, bws, *[g[1] for g in grads], causal,
                  scale, bshd, _stream(q))
    ro, rlse, rdq, rdk, rdv = reference(q, k, v, do, causal, scale, bshd)
    errs = {"O": rel_err(o, ro), "LSE": rel_err(lse, rlse),
            "dQ": rel_err(grads[0][1], rdq), "dK": rel_err(grads[1][1], rdk),
            "dV": rel_err(grads[2][1], rdv)}
    tol = {"O": 2e-2, "LSE": 1e-3, "dQ": 5e-2, "dK": 5e-2, "dV": 5e-2}
    bad = [f"{name} {e:.3g}" for name, e in errs.items() if not e <= tol[name]]
    if not all(bands_intact(x) for x in bufs):
        bad.append("wrote outside an output")
    worst = max(errs.values())
    return desc, bad, worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("fuzz-attention: no CUDA device: SKIPPED")
        return 0
    dev = torch.device("cuda")
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    failures = 0
    for i in range(args.cases):
        case = draw_case(rng)
        try:
            desc, bad, worst = run_case(rng, case, dev)
            torch.cuda.synchronize()
        except Exception as e:  # a refused input is a failure here too
            desc, bad, worst = str(case), [f"{type(e).__name__}: {e}"], math.nan
        failures += bool(bad)
        print(f"{i:4d} {'FAIL ' + '; '.join(bad) if bad else 'ok'} "
              f"max rel err {worst:.2e} | {desc}", flush=True)
    print(f"fuzz-attention: {args.cases - failures} of {args.cases} cases ok "
          f"(seed {args.seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
