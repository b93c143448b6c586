"""One training step of train.py's GPT with each attention, interleaved, and
the attention alone at the model's shape: the figures behind "a step with
kiln's attention is no slower than with the faster SDPA backend".

    python3 examples/gpt/step_bench.py --corpus corpus.bin [--rounds 60]

train.py runs its backends one after the other, so a clock or thermal drift
of the GPU during the run lands on one backend; here one model per backend
starts from the same weights, and each round runs one full step (forward,
backward, clipping, AdamW) of every backend on the same batch, in an order
that rotates each round; synchronised wall time per step, as train.py.
Paired per round: kiln's step over the faster SDPA backend's in that round,
for kiln.attention_qkvpacked ("kiln") and kiln.attention on the unbound views
("kiln_unpacked").

The attention alone: q, k, v as the (B, N, H, D) views of one qkv
projection the model makes (B=16, N=1024, H=12, D=64, causal, bf16,
torch.randn), forward and forward + backward, each the median of CUDA
events around 10 back-to-back calls (kiln.bench's timing).
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from train import BACKENDS, GROUPED_BACKENDS, batches, common_args, model_for  # noqa: E402
from train import train_step as step  # noqa: E402
from kiln.bench import bench_ms  # noqa: E402


def interleaved_steps(data, names, args):
    dev = torch.device("cuda")
    torch.manual_seed(args.seed)
    weights = model_for(names[0], args.context, args.kv_heads).state_dict()
    models, opts = {}, {}
    for n in names:
        m = model_for(n, args.context, args.kv_heads).to(dev)
        m.load_state_dict(weights)
        models[n] = m
        opts[n] = torch.optim.AdamW(m.parameters(), lr=args.lr, betas=(0.9, 0.95),
                                    weight_decay=0.1, fused=True)
    warm = 5
    times = {n: [] for n in names}
    for r, (x, y) in enumerate(batches(data, args.rounds + warm, args.batch,
                                       args.context, args.seed)):
        x, y = x.to(dev), y.to(dev)
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step(models[n], opts[n], x, y)
            torch.cuda.synchronize()
            if r >= warm:
                times[n].append((time.perf_counter() - t0) * 1e3)
    return times


def attention_alone(names, args):
    B, N, H, D = args.batch, args.context, 12, 64
    g = torch.Generator(device="cuda").manual_seed(args.seed)
    qkv = torch.randn(B, N, 3, H, D, device="cuda", dtype=torch.bfloat16, generator=g)
    if args.kv_heads != H:  # q, and k and v of kv_heads heads, apart
        qkv = torch.randn(B, N, (H + 2 * args.kv_heads) * D, device="cuda",
                          dtype=torch.bfloat16, generator=g)

    def call(fn, t):
        if args.kv_heads == H:
            return fn(t)
        q, kv = t.split([H * D, 2 * args.kv_heads * D], -1)
        k, v = kv.view(B, N, 2, args.kv_heads, D).unbind(2)
        return fn(q.view(B, N, H, D), k, v)

    out = {}
    for n in names:
        fn = (BACKENDS if args.kv_heads == H else GROUPED_BACKENDS)[n]
        fwd = bench_ms(lambda: call(fn, qkv))
        leaf = qkv.detach().clone().requires_grad_()
        o = call(fn, leaf)
        do = torch.randn_like(o)
        bwd = bench_ms(lambda: torch.autograd.grad(o, leaf, do, retain_graph=True))
        out[n] = (fwd, bwd)
        del leaf, o, do
    return out


def profiled_steps(data, names, args, steps=5):
    """Per backend: CUDA kernel time per step (all kernels, and those of the
    attention: names with attention, flash, fmha or cudnn) under
    torch.profiler, beside the step's wall time: what the step's difference
    is made of (kernel time, or the GPU waiting for the host)."""
    from torch.profiler import ProfilerActivity, profile
    dev = torch.device("cuda")
    out = {}
    for n in names:
        torch.manual_seed(args.seed)
        m = model_for(n, args.context, args.kv_heads).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=args.lr, fused=True)
        data_iter = batches(data, steps + 3, args.batch, args.context, args.seed)
        for _ in range(3):
            x, y = (t.to(dev) for t in next(data_iter))
            step(m, opt, x, y)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            for x, y in data_iter:
                step(m, opt, x.to(dev), y.to(dev))
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) * 1e3 / steps
        total = attn = 0.0
        for e in prof.key_averages():
            t = getattr(e, "self_device_time_total", None)
            if t is None:
                t = e.self_cuda_time_total
            if e.device_type.name != "CUDA" or not t:
                continue
            total += t
            if any(w in e.key.lower() for w in ("attention", "flash", "fmha", "cudnn", "kiln")):
                attn += t
        # GPU idle between kernels, by the kernel that ended the wait.
        kernels = sorted((e for e in prof.events()
                          if e.device_type.name == "CUDA" and e.time_range.end > e.time_range.start),
                         key=lambda e: e.time_range.start)
        gaps = {}
        for a, b in zip(kernels, kernels[1:]):
            g = b.time_range.start - a.time_range.end
            if g > 0:
                gaps[b.name[:60]] = gaps.get(b.name[:60], 0.0) + g / 1e3 / steps
        top = sorted(gaps.items(), key=lambda kv: -kv[1])[:6]
        print(f"# {n}: GPU idle between kernels {sum(gaps.values()):.3f} ms/step; most before: " +
              "; ".join(f"{k} {v:.3f}" for k, v in top))
        out[n] = (wall, total / 1e3 / steps, attn / 1e3 / steps)
        del m, opt
        torch.cuda.empty_cache()
    return out


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    p = argparse.ArgumentParser()
    common_args(p, "kiln,kiln_unpacked,sdpa_flash,sdpa_cudnn")
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--profile", action="store_true",
                   help="also each backend's kernel time per step (torch.profiler)")
    args = p.parse_args()
    names = args.backends.split(",")
    data = torch.frombuffer(bytearray(open(args.corpus, "rb").read()), dtype=torch.uint8)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{args.rounds} rounds of one step each, {args.batch}x{args.context} tokens")
    alone = attention_alone(names, args)
    print("backend,attention_fwd_ms,attention_bwd_ms (autograd.grad, the "
          "forward outside), x6 layers per step: fwd+bwd ms")
    for n, (f, b) in alone.items():
        print(f"{n},{f:.4f},{b:.4f},{6 * (f + b):.3f}")
    times = interleaved_steps(data, names, args)
    print("backend,median_step_ms,min_step_ms")
    for n, ts in times.items():
        print(f"{n},{median(ts):.3f},{min(ts):.3f}")
    peers = [n for n in names if n.startswith("sdpa")]
    for mine in (n for n in names if n.startswith("kiln")):
        if not peers:
            break
        paired = sorted(k / min(times[n][i] for n in peers)
                        for i, k in enumerate(times[mine]))
        wins = sum(r <= 1.0 for r in paired)
        print(f"# {mine}'s step over the faster SDPA backend's, paired per round: "
              f"median {median(paired):.4f}, quartiles "
              f"{paired[len(paired) // 4]:.4f} / {paired[3 * len(paired) // 4]:.4f}; "
              f"no slower in {wins} of {len(paired)} rounds")
    if args.profile:  # last: the profiler slows what runs after it
        print("backend,profiled_wall_ms_per_step,kernel_ms_per_step,attention_kernel_ms_per_step")
        for n, (w, k, a) in profiled_steps(data, names, args).items():
            print(f"{n},{w:.3f},{k:.3f},{a:.3f}")


if __name__ == "__main__":
    main()
