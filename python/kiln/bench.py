"""kiln beside SDPA's flash and cuDNN backends, on the same tensors, in one
process: python3 -m kiln.bench [--quick] [--backward] [--dtype bf16|fp16]
[--seqs N,N,...] [--pairs NQxNK[xB],...] [--ragged]
[--sequential | --sustained S] [--json FILE].

Inputs are standard normal (torch.randn); each figure is the median over 30
samples of CUDA events around 10 back-to-back calls, divided by 10 (as
peers.py times its peers), so host overhead between calls is hidden the
same way for every peer, but for the host's time to a sample's first
kernel (a tenth of it counts per call). The peers' samples are taken in
turn (one sample of each, the order reversed every round): on a GPU at its
power limit the clocks follow the last second's load, and one peer timed
after another reads 2-5% faster when it comes first after a pause
(docs/experiments/2026-11-25-session28.txt). In turn, every peer runs at
the clocks of their mixed load, so a peer that draws less power lends the
others clock headroom; --sustained S runs each peer alone for S seconds
before its samples (each at its own steady clocks), one after another;
--sequential times them one after another with 5 calls' warm-up.
--backward times torch.autograd.grad of O with
respect to Q, K and V (the forward done once outside the timing), with
2.5x the forward's FLOPs (the FlashAttention papers' convention). Shapes:
B·N = 16k tokens (B = 16384 // N), H·D = 2048, the peers.py shapes, plus
ragged N; --ragged also times kiln at the nearest multiple of 128 with that
length's B and with the ragged row's (they differ at 2049 and 4097: 8 and 7,
4 and 3), so that what the ragged length costs is read apart from the batch.
--pairs adds rows of Nq queries and Nk keys (cross attention, chunked prefill,
decoding), B = 16384 // max(Nq, Nk) unless given, N printed as NqxNk; their
causal FLOPs count the pairs a query attends to (top-left aligned, as SDPA's
is_causal), where the square rows keep the peers' N²/2.
"""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import kiln
from kiln import _cpp

STANDARD = (512, 1024, 2048, 4096, 8192, 16384)
RAGGED = (1000, 3001, 4097)


def sample_ms(fn, batch):
    """Milliseconds per call over `batch` back-to-back calls (CUDA events)."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(batch):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / batch


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def bench_ms(fn, warm=5, reps=30, batch=10):
    """The median of `reps` samples of fn after `warm` calls."""
    return bench_interleaved_ms({None: fn}, warm, reps, batch)[None]


def bench_interleaved_ms(fns, warm=5, reps=30, batch=10):
    """bench_ms of each of `fns` (name -> callable), their samples taken in
    turn (a sample of the first, of the second, ..., then again), so that
    every peer sees the GPU's clocks and temperature as the others do."""
    for fn in fns.values():
        for _ in range(warm):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for r in range(reps):
        names = list(fns) if r % 2 == 0 else list(reversed(fns))
        for name in names:
            times[name].append(sample_ms(fns[name], batch))
    return {name: median(t) for name, t in times.items()}


def sdpa(backend):
    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                  enable_gqa=k.shape[1] != q.shape[1])
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


def sustain(fn, seconds):
    """Calls fn back to back for `seconds` (the GPU at its steady clocks
    under fn's load)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()


def tflops_of(work, prepare, sequential, where="", sustained=0.0):
    """TFLOP/s of each entry of `work` (name -> (fn, q, k, v, FLOPs)): its
    call made by prepare(fn, q, k, v), then timed in turn with the others
    (or one after another, each first run alone for `sustained` seconds);
    NaN for a peer that raised, which is named."""
    tf, calls, flops = {n: float("nan") for n in work}, {}, {}
    for name, (fn, *qkv, f) in work.items():
        try:
            calls[name], flops[name] = prepare(fn, *qkv), f
            if sequential or sustained:
                call = calls.pop(name)
                sustain(call, sustained)
                tf[name] = f / bench_ms(call, warm=0 if sustained else 5) / 1e9
        except Exception as e:  # a peer without this shape
            print(f"# {name} {where}: {type(e).__name__}: {str(e)[:120]}")
        torch.cuda.empty_cache()
    if calls:
        for name, t in bench_interleaved_ms(calls).items():
            tf[name] = flops[name] / t / 1e9
    return tf


def nearest_multiple(n, m=128):
    return max(m, (n + m // 2) // m * m)


def parse_pairs(text):
    """[(Nq, Nk, B or None)] from "NQxNK[xB],..." ("" gives [])."""
    pairs = []
    for item in filter(None, text.split(",")):
        parts = item.split("x")
        if len(parts) not in (2, 3) or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"--pairs: '{item}' is not NQxNK or NQxNKxB (integers >= 1)")
        nq, nk, *b = (int(p) for p in parts)
        pairs.append((nq, nk, b[0] if b else None))
    return pairs


def attended_pairs(nq, nk, causal):
    """Query-key pairs a row block computes usefully: all, or under a causal
    mask aligned at the top left the keys j <= i of each query i."""
    if not causal:
        return nq * nk
    m = min(nq, nk)
    return m * (m + 1) // 2 + (nq - m) * nk


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m kiln.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="N in 1024, 4096 and the ragged 1000, 4097")
    p.add_argument("--backward", action="store_true")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--seqs", default="", help="comma-separated N (default: standard and ragged)")
    p.add_argument("--pairs", default="",
                   help="comma-separated NQxNK[xB]: rows with Nq != Nk (with it, "
                        "the N = Nq = Nk rows only where --seqs gives them)")
    p.add_argument("--heads-dims", default="32x64,16x128", help="HxD pairs")
    p.add_argument("--group", type=int, default=1,
                   help="query heads per k/v head (grouped-query attention: k and v "
                        "have H / GROUP heads; SDPA with enable_gqa=True)")
    p.add_argument("--json", default="", help="also write the rows here")
    p.add_argument("--order", default=",".join(PEERS),
                   help="the peers, in the order they are timed")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--sequential", action="store_true",
                        help="time one peer after another (each its 30 samples) instead "
                             "of taking their samples in turn")
    how.add_argument("--sustained", type=float, default=0.0, metavar="SECONDS",
                        help="one peer after another, each run alone for SECONDS before "
                             "its samples (each at its own steady clocks under the power "
                             "limit; the order reversed every other shape) instead of "
                             "samples in turn")
    p.add_argument("--ragged", action="store_true",
                   help="for N not a multiple of 128, also time kiln at the nearest "
                        "multiple of 128 in the same rotation, twice: with B = 16384 // "
                        "that (the table's row there) and with this row's B (the same "
                        "B and H: what the ragged N alone costs)")
    a = p.parse_args(argv)
    order = a.order.split(",")
    if sorted(order) != sorted(PEERS):
        p.error(f"--order takes each of {', '.join(PEERS)} once")
    try:
        pairs = parse_pairs(a.pairs)
    except ValueError as e:
        p.error(str(e))
    if a.group < 1 or any(int(hd.split("x")[0]) % a.group for hd in a.heads_dims.split(",")):
        p.error(f"--group {a.group} must be >= 1 and divide every H of --heads-dims")
    if not torch.cuda.is_available():
        print("kiln.bench: no CUDA GPU", file=sys.stderr)
        return 2
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    seqs = ([int(x) for x in a.seqs.split(",")] if a.seqs else
            [] if pairs else
            (1000, 1024, 4096, 4097) if a.quick else sorted(STANDARD + RAGGED))
    rows_of = [(n, n, None) for n in seqs] + pairs
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    timing = (f"one peer after another, each alone {a.sustained:g} s first"
              if a.sustained else
              "one peer after another" if a.sequential else "samples in turn")
    autograd = "C++" if _cpp.module() is not None else "Python"
    print(f"# {props.name}, torch {torch.__version__}, kiln {kiln.version()}, "
          f"{a.dtype}, {'backward' if a.backward else 'forward'}, {timing}, "
          f"kiln's eager autograd in {autograd}" +
          (f", {a.group} query heads per k/v head" if a.group > 1 else ""))
    rows = []
    near_cols = (",kiln@128k_tflops,kiln/kiln@128k,kiln@128k_sameB_tflops,"
                 "kiln/kiln@128k_sameB" if a.ragged else "")
    print("D,causal,N,B,H," + ",".join(f"{p}_tflops" for p in PEERS) +
          ",kiln/flash,kiln/cudnn" + near_cols)
    for hd in a.heads_dims.split(","):
        H, D = (int(x) for x in hd.split("x"))
        for causal in (False, True):
            for N, Nk, given_b in rows_of:

                def problem(n, b=None, nk=None):
                    """(q, k, v, FLOPs) at n queries and nk keys (n unless
                    given), B = 16384 // max(n, nk) unless b is given."""
                    nk = nk or n
                    b = b or max(1, 16384 // max(n, nk))
                    g = torch.Generator(device=dev).manual_seed(n + D + 7 * (nk != n) * nk)
                    q = torch.randn(b, H, n, D, device=dev, dtype=dtype, generator=g)
                    k, v = (torch.randn(b, H // a.group, nk, D, device=dev, dtype=dtype,
                                        generator=g)
                            for _ in range(2))
                    attended = n * nk * (0.5 if causal else 1) if nk == n else \
                        attended_pairs(n, nk, causal)
                    return (q, k, v, 4 * b * H * attended * D * (2.5 if a.backward else 1))

                def prepare(fn, q, k, v):
                    """One timed call of fn, called once here, so that a peer
                    without this shape raises before any timing."""
                    if a.backward:
                        qkv = tuple(t.detach().clone().requires_grad_() for t in (q, k, v))
                        out = fn(*qkv, causal)
                        dout = torch.randn_like(out)
                        call = lambda: torch.autograd.grad(out, qkv, dout, retain_graph=True)
                    else:
                        call = lambda: fn(q, k, v, causal)
                    call()
                    return call

                q, k, v, flops = problem(N, given_b, Nk)
                B = q.shape[0]
                shape_order = order
                if a.sustained and len(rows) % 2:
                    shape_order = order[::-1]
                work = {name: (PEERS[name], q, k, v, flops) for name in shape_order}
                near = nearest_multiple(N)
                if a.ragged and near != N and Nk == N:
                    work["kiln@128k"] = (PEERS["kiln"],) + problem(near)
                    if max(1, 16384 // near) != B:
                        work["kiln@128k_sameB"] = (PEERS["kiln"],) + problem(near, B)
                label = N if Nk == N else f"{N}x{Nk}"
                where = f"N={label} D={D} causal={causal}"
                tf = tflops_of(work, prepare, a.sequential, where, a.sustained)
                # Where B = 16384 // N is the same at both lengths, one run
                # serves both columns.
                if "kiln@128k" in tf and "kiln@128k_sameB" not in tf:
                    tf["kiln@128k_sameB"] = tf["kiln@128k"]
                del work, q, k, v
                torch.cuda.empty_cache()
                r = dict(D=D, causal=causal, N=N, Nk=Nk, B=B, H=H, kv_heads=H // a.group,
                         dtype=a.dtype,
                         backward=a.backward, **{f"{n}_tflops": t for n, t in tf.items()})
                ratio = lambda x, y: tf[x] / tf[y] if tf.get(y, 0) > 0 else float("nan")
                extra = ""
                if a.ragged:
                    r["nearest_128k"] = near
                    extra = "".join(f",{tf.get(c, float('nan')):.0f},{ratio('kiln', c):.3f}"
                                    for c in ("kiln@128k", "kiln@128k_sameB"))
                rows.append(r)
                print(f"{D},{int(causal)},{label},{B},{H}," +
                      ",".join(f"{tf[n]:.0f}" for n in PEERS) +
                      f",{ratio('kiln', 'sdpa_flash'):.2f},{ratio('kiln', 'sdpa_cudnn'):.3f}" +
                      extra, flush=True)
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
