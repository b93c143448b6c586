"""Session 61: examples/gpt's training step with every layer through kiln
("kiln_fused") against kiln's attention alone ("kiln", torch's layers): each
layer of the model at its shape (16 x 1024 tokens, d 768), kiln's op beside
torch's, forward and forward + backward, under bf16 autocast over float32
parameters as the model runs (each call its own autocast region, as a
training step casts each parameter once); then one step's GPU kernel time by
kernel name under torch.profiler.

    python3 docs/experiments/2026-11-29-session61-layers.py
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "gpt"))
import train  # noqa: E402
import kiln  # noqa: E402
from kiln.bench import bench_interleaved_ms  # noqa: E402

dev = torch.device("cuda")
T, d = 16 * 1024, 768
torch.manual_seed(0)


def fwd_bwd(fn, *leaves):
    def run():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = fn()
        torch.autograd.grad(y, leaves, torch.ones_like(y))
    return run


def fwd(fn):
    def run():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            fn()
    return run


print("layer,torch_fwd_ms,kiln_fwd_ms,torch_fwdbwd_ms,kiln_fwdbwd_ms")
rows = []
for name, k_in, n_out, act in (("qkv", d, 3 * d, "none"), ("proj", d, d, "none"),
                               ("fc+gelu", d, 4 * d, "gelu"), ("out", 4 * d, d, "none"),
                               ("head", d, 256, "none")):
    layer = torch.nn.Linear(k_in, n_out, bias=name != "head", device=dev)
    x = torch.randn(T, k_in, device=dev, dtype=torch.bfloat16, requires_grad=True)

    def t_fn(layer=layer, x=x, act=act):
        y = layer(x)
        return F.gelu(y, approximate="tanh") if act == "gelu" else y

    def k_fn(layer=layer, x=x, act=act):
        return kiln.linear(x, layer.weight.t(), layer.bias, act)
    leaves = (x, layer.weight) + ((layer.bias,) if layer.bias is not None else ())
    f = bench_interleaved_ms({"t": fwd(t_fn), "k": fwd(k_fn)})
    b = bench_interleaved_ms({"t": fwd_bwd(t_fn, *leaves), "k": fwd_bwd(k_fn, *leaves)})
    rows.append((name, f["t"], f["k"], b["t"], b["k"]))
for name, norm in (("layer_norm", None),):
    ln = torch.nn.LayerNorm(d, device=dev)
    x = torch.randn(T, d, device=dev, requires_grad=True)  # the fp32 residual stream
    f = bench_interleaved_ms({"t": fwd(lambda: ln(x)),
                              "k": fwd(lambda: kiln.layer_norm(x, ln.weight, ln.bias))})
    b = bench_interleaved_ms({
        "t": fwd_bwd(lambda: ln(x), x, ln.weight, ln.bias),
        "k": fwd_bwd(lambda: kiln.layer_norm(x, ln.weight, ln.bias), x, ln.weight, ln.bias)})
    rows.append((name, f["t"], f["k"], b["t"], b["k"]))
logits = torch.randn(T, 256, device=dev, dtype=torch.bfloat16, requires_grad=True)
labels = torch.randint(0, 256, (T,), device=dev)
f = bench_interleaved_ms({
    "t": fwd(lambda: F.cross_entropy(logits.float(), labels)),
    "k": fwd(lambda: kiln.cross_entropy(logits, labels))})
b = bench_interleaved_ms({
    "t": fwd_bwd(lambda: F.cross_entropy(logits.float(), labels), logits),
    "k": fwd_bwd(lambda: kiln.cross_entropy(logits, labels), logits)})
rows.append(("cross_entropy", f["t"], f["k"], b["t"], b["k"]))
for r in rows:
    print(f"{r[0]},{r[1]:.4f},{r[2]:.4f},{r[3]:.4f},{r[4]:.4f}")
per_step = {"qkv": 6, "proj": 6, "fc+gelu": 6, "out": 6, "head": 1, "layer_norm": 13,
            "cross_entropy": 1}
tt = sum(per_step[r[0]] * r[3] for r in rows)
kk = sum(per_step[r[0]] * r[4] for r in rows)
print(f"# per step (x layers): torch {tt:.3f} ms, kiln {kk:.3f} ms of forward + backward")

# One step's kernels by name.
from torch.profiler import ProfilerActivity, profile  # noqa: E402
data = torch.randint(0, 256, (1 << 20,), dtype=torch.uint8)
for n in ("kiln_fused", "kiln"):
    torch.manual_seed(1)
    m = train.model_for(n, 1024).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
    it = train.batches(data, 8, 16, 1024, 0)
    for _ in range(3):
        x, y = (t.to(dev) for t in next(it))
        train.train_step(m, opt, x, y)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for x, y in it:
            train.train_step(m, opt, x.to(dev), y.to(dev))
        torch.cuda.synchronize()
    per = {}
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", 0) or 0
        if e.device_type.name == "CUDA" and t:
            per[e.key[:70]] = (per.get(e.key[:70], (0, 0))[0] + t / 5e3,
                               e.count // 5)
    print(f"# {n}: kernel ms per step {sum(v[0] for v in per.values()):.3f}")
    for k, (t, c) in sorted(per.items(), key=lambda kv: -kv[1][0])[:18]:
        print(f"  {t:7.3f} ms  x{c:<4d} {k}")
    del m, opt
