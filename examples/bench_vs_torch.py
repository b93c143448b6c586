"""kiln's fused kernels beside PyTorch's, on the same tensors, in one process:
RMSNorm, LayerNorm (forward, and forward + backward), rotary embedding, softmax cross-entropy (forward, and
forward + backward) and a linear layer with bias and GELU in the GEMM's
epilogue. Each kiln kernel is a DSL program (kernels/) whose schedule
AutotunedKernel tunes on the first call and records for the GPU; each is
checked against float64 before it is timed.

    python3 examples/bench_vs_torch.py [--ops norms,rotary,ce,linear]
        [--norm-shapes 16384x4096,16384x8192] [--json FILE]

bf16 standard normal inputs. Timing: kiln.bench's (CUDA events around 10
back-to-back calls, median of 30 samples), the same for every column; torch
eager, torch.compile (default mode, static shapes, compiled and warmed
before timing) and, for the norms, a copy of the same bytes (the bandwidth
yardstick) and for the linear layer cuBLASLt's fused bias + GELU
(torch._addmm_activation). Ratios are kiln / peer time inverted: > 1 means
kiln is faster.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
import kiln  # noqa: E402
from kiln.bench import bench_ms  # noqa: E402

DEV = torch.device("cuda")


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / max(b.norm().item(), 1e-30)).item()


def rotate_half_rope(x, cos, sin):
    """HF Llama's apply_rotary_pos_emb on (B, N, H, D) with (N, D/2) tables."""
    c = torch.cat((cos, cos), -1)[None, :, None, :].to(x.dtype)
    s = torch.cat((sin, sin), -1)[None, :, None, :].to(x.dtype)
    x1, x2 = x.chunk(2, -1)
    return x * c + torch.cat((-x2, x1), -1) * s


def ce_fwd_bwd(fn, logits, labels):
    def run():
        lg = logits.detach().requires_grad_()
        loss = fn(lg, labels)
        loss.backward()
        return lg.grad
    return run


def norm_cases(randn, R, C):
    x, w, b = randn(R, C), randn(C), randn(C)
    y = torch.empty_like(x)
    rms = lambda x, w: F.rms_norm(x, (C,), w, 1e-6)
    ln = lambda x, w, b: F.layer_norm(x, (C,), w, b, 1e-5)
    crms, cln = torch.compile(rms), torch.compile(ln)
    xd = x.double()
    return [
        ("rmsnorm", f"{R}x{C}", {
            "kiln": lambda: kiln.rms_norm(x, w, 1e-6),
            "torch": lambda: rms(x, w), "compile": lambda: crms(x, w),
            "copy": lambda: y.copy_(x)},
         lambda: rel(kiln.rms_norm(x, w, 1e-6),
                     xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6)
                     * w.double()),
         "GB/s", 2 * x.numel() * 2),
        ("layernorm", f"{R}x{C}", {
            "kiln": lambda: kiln.layer_norm(x, w, b, 1e-5),
            "torch": lambda: ln(x, w, b), "compile": lambda: cln(x, w, b),
            "copy": lambda: y.copy_(x)},
         lambda: rel(kiln.layer_norm(x, w, b, 1e-5),
                     F.layer_norm(xd, (C,), w.double(), b.double(), 1e-5)),
         "GB/s", 2 * x.numel() * 2)] + norm_backward_cases(
             x, w, b, randn(R, C), rms, ln, crms, cln)


def norm_backward_cases(x, w, b, dy, rms, ln, crms, cln):
    """The norms' forward + backward (dX, dW, dB by autograd): bytes of X and
    Y forward, X, dY and dX backward."""
    C = x.shape[-1]
    xg, wg, bg = (t.detach().clone().requires_grad_() for t in (x, w, b))
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))

    def grads(f, *args):
        return lambda: torch.autograd.grad(f(*args), args, dy)

    def check(f, fd, n):
        got = torch.autograd.grad(f(*(xg, wg, bg)[:n]), (xg, wg, bg)[:n], dy)
        want = torch.autograd.grad(fd(*(xd, wd, bd)[:n]), (xd, wd, bd)[:n],
                                   dy.double())
        return max(rel(a, r) for a, r in zip(got, want))

    rms_d = lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) +
                                         1e-6) * w
    ln_d = lambda x, w, b: F.layer_norm(x, (C,), w, b, 1e-5)
    amount = 5 * x.numel() * 2
    return [
        ("rmsnorm fwd+bwd", f"{x.shape[0]}x{C}", {
            "kiln": grads(lambda x, w: kiln.rms_norm(x, w, 1e-6), xg, wg),
            "torch": grads(rms, xg, wg), "compile": grads(crms, xg, wg)},
         lambda: check(lambda x, w: kiln.rms_norm(x, w, 1e-6), rms_d, 2),
         "GB/s", amount),
        ("layernorm fwd+bwd", f"{x.shape[0]}x{C}", {
            "kiln": grads(lambda x, w, b: kiln.layer_norm(x, w, b, 1e-5),
                          xg, wg, bg),
            "torch": grads(ln, xg, wg, bg), "compile": grads(cln, xg, wg, bg)},
         lambda: check(lambda x, w, b: kiln.layer_norm(x, w, b, 1e-5), ln_d, 3),
         "GB/s", amount)]


def rotary_case(randn, B, N, H, D):
    x = randn(B, N, H, D)
    inv = 10000.0 ** (-torch.arange(0, D, 2, device=DEV,
                                    dtype=torch.float64) / D)
    ang = torch.arange(N, device=DEV, dtype=torch.float64)[:, None] * inv
    cos, sin = ang.cos().float(), ang.sin().float()
    crope = torch.compile(rotate_half_rope)
    return [("rotary", f"{B}x{N}x{H}x{D}", {
        "kiln": lambda: kiln.rotary(x, cos, sin),
        "torch": lambda: rotate_half_rope(x, cos, sin),
        "compile": lambda: crope(x, cos, sin)},
        lambda: rel(kiln.rotary(x, cos, sin),
                    rotate_half_rope(x.double(), cos.double(), sin.double())),
        "GB/s", 2 * x.numel() * 2)]


def ce_cases(randn, g, R, V):
    logits = 2 * randn(R, V)
    labels = torch.randint(0, V, (R,), device=DEV, generator=g)
    ce = lambda lg, lb: F.cross_entropy(lg, lb)
    cce = torch.compile(ce)
    check = lambda: rel(kiln.cross_entropy(logits, labels),
                        F.cross_entropy(logits.double(), labels))
    return [
        ("cross_entropy fwd", f"{R}x{V}", {
            "kiln": lambda: kiln.cross_entropy(logits, labels),
            "torch": lambda: ce(logits, labels),
            "compile": lambda: cce(logits, labels)},
         check, "GB/s", logits.numel() * 2),
        ("cross_entropy fwd+bwd", f"{R}x{V}", {
            "kiln": ce_fwd_bwd(kiln.cross_entropy, logits, labels),
            "torch": ce_fwd_bwd(ce, logits, labels),
            "compile": ce_fwd_bwd(cce, logits, labels)},
         check, "GB/s", 3 * logits.numel() * 2)]


def linear_case(randn, n):
    a, w, bias = randn(n, n), randn(n, n) / 64, randn(n)
    lin = lambda a, w, b: F.gelu(a @ w + b, approximate="tanh")
    clin = torch.compile(lin)
    return [("linear+bias+gelu", f"{n}^3", {
        "kiln": lambda: kiln.linear(a, w, bias, activation="gelu"),
        "cublaslt": lambda: torch._addmm_activation(bias, a, w, use_gelu=True),
        "torch": lambda: lin(a, w, bias),
        "compile": lambda: clin(a, w, bias)},
        lambda: rel(kiln.linear(a, w, bias, activation="gelu"),
                    F.gelu(a.double() @ w.double() + bias.double(),
                           approximate="tanh")),
        "TFLOP/s", 2 * n ** 3)]


def cases(ops, norm_shapes):
    """(op, shape, {peer: fn}, check, unit, amount): amount in bytes or FLOPs
    per call."""
    g = torch.Generator(device=DEV).manual_seed(0)
    randn = lambda *s: torch.randn(*s, device=DEV, dtype=torch.bfloat16,
                                   generator=g)
    out = []
    if "norms" in ops:
        for R, C in norm_shapes:
            out += norm_cases(randn, R, C)
    if "rotary" in ops:
        out += rotary_case(randn, 8, 4096, 32, 128)
    if "ce" in ops:
        for R, V in ((16384, 32000), (4096, 128256)):
            out += ce_cases(randn, g, R, V)
    if "linear" in ops:
        for n in (4096, 8192):
            out += linear_case(randn, n)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="examples/bench_vs_torch.py")
    p.add_argument("--ops", default="norms,rotary,ce,linear")
    # Small shapes show the host time per call from Python (3001x4096 and
    # 4096x1024 are 24 and 8 MB).
    p.add_argument("--norm-shapes", default="16384x4096,16384x8192")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_vs_torch: no CUDA GPU", file=sys.stderr)
        return 2
    ops = a.ops.split(",")
    print(f"# {torch.cuda.get_device_name(DEV)}, torch {torch.__version__}, "
          f"kiln {kiln.version()}, bf16; rate per peer, then kiln's speed-up")
    rows = []
    norm_shapes = [tuple(int(x) for x in sh.split("x"))
                   for sh in a.norm_shapes.split(",")]
    for op, shape, peers, check, unit, amount in cases(ops, norm_shapes):
        err = check()  # also tunes kiln's schedule (outside the timing)
        for f in peers.values():
            f()  # compiles torch.compile's kernels
        scale = 1e9 if unit == "GB/s" else 1e12
        rate = {n: amount / (bench_ms(f) * 1e-3) / scale
                for n, f in peers.items()}
        ratios = {n: rate["kiln"] / r for n, r in rate.items() if n != "kiln"}
        rows.append(dict(op=op, shape=shape, unit=unit, error=err,
                         rate=rate, kiln_over=ratios))
        print(f"{op:22s} {shape:16s} {unit:8s} " +
              " ".join(f"{n} {r:7.1f}" for n, r in rate.items()) + " | " +
              " ".join(f"x{n} {r:.2f}" for n, r in ratios.items()) +
              f" | rel err {err:.1e}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
