#!/usr/bin/env python3
"""Random attention problems against an fp32 reference, on a GPU.

Each case draws a shape (B, H, Nq, Nk, D; a third of the time k and v with
a divisor of H heads: grouped-query), dtype, layout and causality (a fifth
of the time with key lengths per batch, some past Nk or below 0, NaN in
every k/v slot past them: the forward alone, causal at the bottom right), and
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


def abs_err(x, ref):
    x = x.float()
    return (x - ref.float()).abs().max().item() if torch.isfinite(x).all() else math.inf


def reference(q, k, v, do, causal, scale, bshd, dtype=torch.float32,
              lengths=None):
    """O, LSE and the gradients (bhsd tensors), computed in `dtype`: fp32,
    the truth, or the inputs' own (fp32 softmax and LSE), whose error sets
    what a kernel in that precision may be expected to miss by. With
    `lengths` (clamped, one per batch) O and LSE alone: batch b's first
    lengths[b] keys, causal its queries the last of them; a row of none
    O 0, LSE -inf."""
    t = [x.to(dtype).transpose(1, 2) if bshd else x.to(dtype) for x in (q, k, v)]
    q_, k_, v_ = (x.detach().requires_grad_() for x in t)
    # Grouped heads: each k/v head repeated for its H / Hk query heads
    # (autograd sums dk and dv over them).
    group = q_.shape[1] // k_.shape[1]
    ke, ve = (x.repeat_interleave(group, dim=1) for x in (k_, v_))
    s = (q_ @ ke.transpose(-1, -2)).float() * scale
    if lengths is not None:
        nq, nk = s.shape[-2:]
        n = torch.tensor(lengths, device=s.device)[:, None, None, None]
        j = torch.arange(nk, device=s.device)[None, None, None, :]
        i = torch.arange(nq, device=s.device)[None, None, :, None]
        seen = (j < n) & ((j <= n - nq + i) if causal else True)
        s = s.masked_fill(~seen, float("-inf"))
        ve = ve.nan_to_num(0.0)  # the slots past a length hold NaN
        lse = torch.logsumexp(s, -1)
        o = (torch.softmax(s, -1).nan_to_num(0.0).to(dtype) @ ve)
        back = (lambda x: x.transpose(1, 2)) if bshd else (lambda x: x)
        return back(o), lse
    if causal:
        nq, nk = s.shape[-2:]
        keep = torch.ones(nq, nk, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = torch.softmax(s, -1).to(dtype) @ ve
    g = do.to(dtype).transpose(1, 2) if bshd else do.to(dtype)
    dq, dk, dv = torch.autograd.grad(o, (q_, k_, v_), g)
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
    # Grouped-query: k and v with a divisor of h heads, a third of the time.
    hk = h if rng.random() < 0.67 else rng.choice(
        [x for x in range(1, h + 1) if h % x == 0])
    nq = draw_length(rng)
    nk = nq if rng.random() < 0.5 else draw_length(rng)
    scale = 1.0 / math.sqrt(d) if rng.random() < 0.7 else rng.uniform(0.02, 0.3)
    deterministic = rng.random() < 0.25  # dQ by its own kernel
    lengths = None if rng.random() < 0.8 else [
        rng.choice([0, nk, nk + 3, -2, rng.randint(1, nk)]) for _ in range(b)]
    return (dtype, d, bshd, causal, b, h, hk, nq, nk, scale, deterministic,
            lengths)


def run_lengths_case(q, k, v, case, desc, dev):
    """The forward with key lengths: NaN in every k/v slot past a length, O
    and LSE against the reference (rows of no keys: O 0, LSE -inf)."""
    dtype, d, bshd, causal, b, h, hk, nq, nk, scale, _, given = case
    lengths = [min(max(n, 0), nk) for n in given]
    for t in (k, v):
        tb = t.transpose(1, 2) if bshd else t
        for i, n in enumerate(lengths):
            tb[i, :, n:] = float("nan")
    oshape = (b, nq, h, d) if bshd else (b, h, nq, d)
    obuf, o = guarded(oshape, dtype, dev)
    lbuf, lse = guarded((b, h, nq), torch.float32, dev)
    n = _lib.forward_workspace(q, k, causal, scale, bshd, key_lengths=True)
    ws = torch.full((n,), float("nan"), device=dev) if n else None
    _lib.forward(q, k, v, o, lse, ws, causal, scale, bshd, _stream(q),
                 k_lengths=torch.tensor(given, dtype=torch.int32, device=dev))
    truth = reference(q, k, v, None, causal, scale, bshd, lengths=lengths)
    low = reference(q, k, v, None, causal, scale, bshd, dtype, lengths)
    errs, bad = {}, []
    none = torch.isinf(truth[1])  # rows of no keys
    for name, x, t, lp, tl in (("O", o, truth[0], low[0], 2e-2),
                               ("LSE", lse, truth[1], low[1], 1e-3)):
        if name == "LSE":
            if not (x[none] == float("-inf")).all():
                bad.append("LSE of a row of no keys is not -inf")
            x, t, lp = x[~none], t[~none], lp[~none]
        if x.numel() == 0:
            errs[name] = 0.0
            continue
        err, scale_ = abs_err(x, t), max(t.abs().max().item(), 1e-30)
        errs[name] = err / scale_
        if not (err <= tl * scale_ or err <= 2 * abs_err(lp, t) + 1e-3):
            bad.append(f"{name} {err / scale_:.3g} (inputs' precision "
                       f"{abs_err(lp, t) / scale_:.3g})")
    if not all(bands_intact(x) for x in (obuf, lbuf)):
        bad.append("wrote outside an output")
    return f"{desc} key-lengths={given}", bad, max(errs.values())


def run_case(rng, case, dev):
    dtype, d, bshd, causal, b, h, hk, nq, nk, scale, deterministic, lengths = case
    q, qk = make_input(rng, (b, h, nq, d), dtype, bshd, dev)
    k, kk = make_input(rng, (b, hk, nk, d), dtype, bshd, dev)
    v, vk = make_input(rng, (b, hk, nk, d), dtype, bshd, dev)
    do, _ = make_input(rng, (b, h, nq, d), dtype, bshd, dev)
    desc = (f"B={b} H={h}{f'/{hk}' if hk != h else ''} Nq={nq} Nk={nk} D={d} {str(dtype)[6:]} "
            f"{'bshd' if bshd else 'bhsd'} {'causal' if causal else 'full'} "
            f"scale={scale:.3g} q:{qk} k:{kk} v:{vk}"
            f"{' deterministic' if deterministic else ''}")
    if lengths is not None:
        return run_lengths_case(q, k, v, case, desc, dev)
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
    torch.use_deterministic_algorithms(deterministic)
    try:
        _lib.backward(q, k, v, o, do, lse, bws, *[g[1] for g in grads], causal,
                      scale, bshd, _stream(q))
    finally:
        torch.use_deterministic_algorithms(False)
    truth = reference(q, k, v, do, causal, scale, bshd)
    low = reference(q, k, v, do, causal, scale, bshd, dtype)
    got = (o, lse, *[g[1] for g in grads])
    # Relative to the largest reference value, within tol; or no further off
    # than twice the same math in the inputs' precision, plus 1e-3 (inputs
    # are standard normal: results are of order 1; where every row sees one
    # key, dQ and dK are exactly 0, and fp32 sums in another order leave
    # noise of order 1e-6).
    tol = (2e-2, 1e-3, 5e-2, 5e-2, 5e-2)
    errs, bad = {}, []
    for name, x, t, lp, tl in zip(("O", "LSE", "dQ", "dK", "dV"), got, truth,
                                  low, tol):
        err, scale_ = abs_err(x, t), max(t.abs().max().item(), 1e-30)
        errs[name] = err / scale_
        if not (err <= tl * scale_ or err <= 2 * abs_err(lp, t) + 1e-3):
            bad.append(f"{name} {err / scale_:.3g} (inputs' precision "
                       f"{abs_err(lp, t) / scale_:.3g})")
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
