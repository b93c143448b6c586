"""Keys per batch (kiln.attention's key_lengths): decoding and short chunks
on a KV cache of Nk slots whose B sequences hold lengths drawn uniformly from
[1, Nk] (standard normal q, k, v; slots past a length hold NaN). Same tensors,
one process, samples in turn, CUDA events around 10 back-to-back calls;
`gpu` times after torch.cuda._sleep has queued the calls behind a busy GPU
(the kernels alone), `wall` without (what an eager caller sees).
  kiln_len:  kiln.attention(..., key_lengths=lengths)
  kiln_full: kiln.attention on the whole cache, zeros past the lengths
             (every slot attended: what ignoring the lengths costs; another
             problem's output, not compared)
  kiln_mean: kiln.attention on a cache of the mean length (no padding)
  sdpa_mask: SDPA with a boolean (B, 1, 1, Nk) mask of the lengths (the
             backend torch picks; NaN slots zeroed for it, a mask does not
             keep NaN out of P·V), enable_gqa
  sdpa_cudnn, sdpa_efficient: the same forced to one backend, where it runs
The max abs difference of kiln_len against float64 per sequence checks it.
Causal rows (a chunk of Nq new tokens, the last of each length; lengths
uniform in Nq..Nk): kiln_len causal against SDPA with the boolean mask of
the keys each query sees (kiln_full and kiln_mean left out).

    PYTHONPATH=python python3 docs/experiments/2026-11-29-session65-key-lengths.py
"""
import math
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import kiln
from kiln.bench import median


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


def times(fns, reps=16, batch=10):
    ok = {}
    for n, fn in fns.items():
        try:
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            ok[n] = fn
        except Exception as e:  # a backend that does not take the problem
            print(f"# {n}: {type(e).__name__}: {str(e).splitlines()[0][:120]}",
                  file=sys.stderr)
    out = {}
    for mode, cycles in (("wall", 0), ("gpu", 20_000_000)):
        t = {n: [] for n in ok}
        for r in range(reps):
            for n in (ok if r % 2 == 0 else list(reversed(ok))):
                t[n].append(sample(ok[n], batch, cycles))
        out[mode] = {n: median(x) for n, x in t.items()}
    return out


def row(B, H, Hk, Nq, Nk, D, seed, causal=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, H, Nq, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(B, Hk, Nk, D, device="cuda", dtype=torch.bfloat16,
                        generator=g) for _ in range(2))
    lengths = torch.randint(Nq if causal else 1, Nk + 1, (B,), device="cuda",
                            generator=g, dtype=torch.int32)
    mean = int(lengths.float().mean().round().item())
    km, vm = k[:, :, :mean].contiguous(), v[:, :, :mean].contiguous()
    valid = torch.arange(Nk, device="cuda")[None, :] < lengths[:, None].long()
    kz, vz = (t.masked_fill(~valid[:, None, :, None], 0) for t in (k, v))
    k.masked_fill_(~valid[:, None, :, None], float("nan"))
    v.masked_fill_(~valid[:, None, :, None], float("nan"))
    mask = valid[:, None, None, :]
    if causal:  # query i of batch b sees keys j <= L_b - Nq + i
        at = lengths.long()[:, None] - Nq + torch.arange(Nq, device="cuda")[None, :]
        mask = (torch.arange(Nk, device="cuda")[None, None, :] <= at[:, :, None])[:, None]
    with torch.no_grad():
        o = kiln.attention(q, k, v, key_lengths=lengths, causal=causal)
        err = 0.0
        for b, n in enumerate(lengths.tolist()):
            kk = k[b, :, :n].double().repeat_interleave(H // Hk, 0)
            vv = v[b, :, :n].double().repeat_interleave(H // Hk, 0)
            s = q[b].double() @ kk.transpose(-1, -2) / math.sqrt(D)
            if causal:
                s = s.masked_fill(~mask[b, 0, :, :n], float("-inf"))
            err = max(err, (o[b].double() - torch.softmax(s, -1) @ vv).abs().max().item())

        def sdpa(backend=None):
            def run():
                if backend is None:
                    return F.scaled_dot_product_attention(q, kz, vz, attn_mask=mask,
                                                          enable_gqa=True)
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, kz, vz, attn_mask=mask,
                                                          enable_gqa=True)
            return run

        fns = {
            "kiln_len": lambda: kiln.attention(q, k, v, key_lengths=lengths,
                                               causal=causal),
            "kiln_full": lambda: kiln.attention(q, kz, vz),
            "kiln_mean": lambda: kiln.attention(q, km, vm),
            "sdpa_mask": sdpa(),
            "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
            "sdpa_efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION),
        }
        if causal:
            del fns["kiln_full"], fns["kiln_mean"]
        t = times(fns)
    cols = ["kiln_len", "kiln_full", "kiln_mean", "sdpa_mask", "sdpa_cudnn",
            "sdpa_efficient"]
    out = [f"{B},{H},{Hk},{Nq},{Nk},{D},{int(causal)},{mean}"]
    for mode in ("gpu", "wall"):
        out += [f"{t[mode][c]:.1f}" if c in t[mode] else "-" for c in cols]
    return ",".join(out) + f",{err:.1e}"


def main():
    torch.manual_seed(0)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("B,H,Hk,Nq,Nk,D,causal,mean_len," +
          ",".join(f"{m}_{c}" for m in ("gpu_us", "wall_us") for c in
                   ("kiln_len", "kiln_full", "kiln_mean", "sdpa_mask",
                    "sdpa_cudnn", "sdpa_efficient")) + ",max_abs_err")
    for i, shape in enumerate([(16, 32, 8, 1, 8192, 128), (64, 32, 8, 1, 8192, 128),
                               (16, 32, 8, 4, 8192, 128), (16, 32, 8, 1, 4097, 64),
                               (64, 32, 8, 1, 32768, 128), (8, 32, 8, 16, 8192, 128),
                               (4, 16, 16, 1000, 8192, 128), (8, 32, 32, 1, 3001, 64)]):
        print(row(*shape, seed=i), flush=True)
    for i, shape in enumerate([(4, 16, 16, 1000, 8192, 128), (8, 32, 8, 512, 4096, 64),
                               (16, 32, 8, 16, 8192, 128)]):
        print(row(*shape, seed=100 + i, causal=True), flush=True)


if __name__ == "__main__":
    main()
