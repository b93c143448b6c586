"""Session 62: where a training step of examples/gpt spends its host time,
kiln_fused (every layer through kiln) beside kiln (torch's layers, kiln's
attention). Per backend: the host time to enqueue one step (no synchronize
inside), the synchronised wall time, then torch.profiler over 3 steps: CPU
self time by op and the CUDA kernels' total, per step.

    python3 docs/experiments/2026-11-29-session62-step-profile.py --corpus corpus.bin
"""
import argparse
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "examples", "gpt"))
from train import batches, common_args, model_for  # noqa: E402
from train import train_step as step  # noqa: E402

p = argparse.ArgumentParser()
common_args(p, "kiln_fused,kiln")
p.add_argument("--steps", type=int, default=20)
args = p.parse_args()
data = torch.frombuffer(bytearray(open(args.corpus, "rb").read()), dtype=torch.uint8)
dev = torch.device("cuda")
names = args.backends.split(",")
for n in names:
    torch.manual_seed(args.seed)
    m = model_for(n, args.context).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=args.lr, fused=True)
    xs = [(x.to(dev), y.to(dev)) for x, y in
          batches(data, args.steps + 8, args.batch, args.context, args.seed)]
    for x, y in xs[:5]:
        step(m, opt, x, y)
    torch.cuda.synchronize()
    enq, wall = [], []
    for x, y in xs[5:5 + args.steps]:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(m, opt, x, y)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        enq.append((t1 - t0) * 1e3)
        wall.append((t2 - t0) * 1e3)
    enq.sort()
    wall.sort()
    print(f"{n}: enqueue ms median {enq[len(enq) // 2]:.2f} min {enq[0]:.2f}; "
          f"wall ms median {wall[len(wall) // 2]:.2f} min {wall[0]:.2f}")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for x, y in xs[-3:]:
            step(m, opt, x, y)
        torch.cuda.synchronize()
    ka = prof.key_averages()
    cuda = sum(e.self_device_time_total for e in ka) / 3 / 1e3
    cpu = sum(e.self_cpu_time_total for e in ka) / 3 / 1e3
    print(f"{n}: per step under the profiler: CPU self {cpu:.2f} ms, CUDA {cuda:.2f} ms")
    print(ka.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60))
