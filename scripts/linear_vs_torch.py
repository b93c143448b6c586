"""kiln.linear against torch in one process, on the same standard normal
tensors, samples in turn (kiln.bench's bench_interleaved_ms: CUDA events
around back-to-back calls, each sample of each function in rotation): x @ w,
and with bias + GELU torch._addmm_activation(bias, x, w, use_gelu=True)
(cuBLASLt's fused epilogue, GELU's tanh form). --weights nk: the weight as
nn.Linear stores it, (N, K), passed as w.t() to both (kiln reads it as BT).
--backward: forward and backward (dX, dW, db through autograd, the same
upstream gradient) against torch's F.linear (+ GELU) with autograd.
The first kiln call of a
shape and epilogue tunes it (first_call_s) unless KILN_TUNING_DB has it.
Session 56-57's README figures came from this measurement.

Usage: python3 scripts/linear_vs_torch.py [--mnk 8192x50264x768,...]
           [--epilogues none,bias+gelu] [--weights kn,nk] [--backward] [--reps 20]
"""
import argparse, os, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import kiln  # noqa: E402
from kiln.bench import bench_interleaved_ms  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--mnk", default="8192x50264x768,8192x50257x768,8192x3072x768,"
               "4097x3001x768,8192x11008x4096")
p.add_argument("--epilogues", default="none,bias+gelu")
p.add_argument("--weights", default="kn")
p.add_argument("--reps", type=int, default=20)
p.add_argument("--backward", action="store_true")
args = p.parse_args()
epilogues = args.epilogues.split(",")
for e in epilogues:
    if e not in ("none", "bias+gelu"):
        sys.exit(f"--epilogues: {e!r} is not none or bias+gelu")
for layout in args.weights.split(","):
    if layout not in ("kn", "nk"):
        sys.exit(f"--weights: {layout!r} is not kn or nk")
dev = torch.device("cuda")
print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}")
print("shape,weight,epilogue,kiln_ms,torch_ms,kiln_tflops,torch_tflops,kiln/torch,"
      "maxrelerr,stride0,first_call_s")
for shape in args.mnk.split(","):
    m, n, k = (int(d) for d in shape.split("x"))
    g = torch.Generator(device=dev).manual_seed(n)
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=g)
    stored = torch.randn(k, n, device=dev, dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, device=dev, dtype=torch.bfloat16, generator=g)
    for layout, epi in [(l, e) for l in args.weights.split(",") for e in epilogues]:
        # nk: the same values stored (N, K), as nn.Linear keeps its weight.
        w = stored if layout == "kn" else stored.t().contiguous().t()
        if args.backward:
            xs, ws, bs = (t.detach().requires_grad_() for t in (x, w, b))
            gy = torch.randn(m, n, device=dev, dtype=torch.bfloat16,
                             generator=g)
            grad_of = [xs, ws] + ([bs] if epi != "none" else [])

            def train(f):
                def step():
                    y = f()
                    torch.autograd.grad(y, grad_of, gy)
                    return y.detach()
                return step
            if epi == "none":
                kf = train(lambda: kiln.linear(xs, ws))
                tf = train(lambda: xs @ ws)
            else:
                kf = train(lambda: kiln.linear(xs, ws, bs, activation="gelu"))
                tf = train(lambda: torch.nn.functional.gelu(
                    torch.addmm(bs, xs, ws), approximate="tanh"))
        elif epi == "none":
            kf, tf = (lambda: kiln.linear(x, w)), (lambda: x @ w)
        else:
            kf = lambda: kiln.linear(x, w, b, activation="gelu")
            tf = lambda: torch._addmm_activation(b, x, w, use_gelu=True)
        t0 = time.time()
        y = kf()
        torch.cuda.synchronize()
        first = time.time() - t0
        ref = tf().float()
        err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
        r = bench_interleaved_ms({"kiln": kf, "torch": tf}, reps=args.reps)
        flops = 2 * m * n * k * (3 if args.backward else 1)
        print(f"{shape},{layout},{epi},{r['kiln']:.4f},{r['torch']:.4f},"
              f"{flops / r['kiln'] / 1e9:.0f},{flops / r['torch'] / 1e9:.0f},"
              f"{r['torch'] / r['kiln']:.3f},{err:.1e},{y.stride(0)},{first:.1f}",
              flush=True)
