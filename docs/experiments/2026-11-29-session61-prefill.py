"""Session 61: where a batch-1 prefill of examples/gpt's model spends its time,
per backend: the forward's time on the GPU (CUDA events around one call, after
a synchronize), the host's time to issue it (perf_counter, no synchronize),
and for kiln_fused the profiler's top host ops.

    python3 docs/experiments/2026-11-29-session61-prefill.py
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "gpt"))
import train  # noqa: E402

torch.manual_seed(0)
data = torch.randint(0, 256, (4096,), dtype=torch.uint8)
models = {name: train.model_for(name, 1024).cuda() for name in
          ("kiln_fused", "kiln", "sdpa_flash")}


@torch.no_grad()
def measure(model, n, reps=30):
    x = data[:n].long().unsqueeze(0).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(5):
            model(x)
        torch.cuda.synchronize()
        gpu, host = [], []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            s.record()
            model(x)
            e.record()
            host.append((time.perf_counter() - t0) * 1e3)
            e.synchronize()
            gpu.append(s.elapsed_time(e))
    return sorted(gpu)[reps // 2], sorted(host)[reps // 2]


print("backend,n,events_ms,host_issue_ms")
for n in (100, 257, 512, 1024):
    for name, m in models.items():
        g, h = measure(m, n)
        print(f"{name},{n},{g:.2f},{h:.2f}", flush=True)

x = data[:1024].long().unsqueeze(0).cuda()
for name in ("kiln_fused", "sdpa_flash"):
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                models[name](x)
            torch.cuda.synchronize()
    print(f"# {name}, 5 forwards at n=1024")
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=50))

# The copies the fused model's ops make (KILN_LOG=launch, read per call).
os.environ["KILN_LOG"] = "launch"
print("# kiln_fused at n=100 under KILN_LOG=launch")
measure(models["kiln_fused"], 100, reps=1)
