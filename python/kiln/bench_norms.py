"""kiln.rms_norm and kiln.layer_norm beside PyTorch's on the same tensors,
in one process, with a copy of the same bytes as the bandwidth yardstick:
python3 -m kiln.bench_norms [--shapes RxC,...] [--json FILE].

bf16 standard normal inputs; each figure the median over 30 samples of CUDA
events around 10 back-to-back calls (kiln.bench's timing). Bytes moved: x
read, y written, the weight (and bias) read. The copy is y.copy_(x). kiln
tunes its schedule on the first call per column count (outside the timing).
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

import kiln
from kiln.bench import bench_ms


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m kiln.bench_norms")
    p.add_argument("--shapes", default="16384x4096,16384x8192,3001x4096,4096x1024")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("kiln.bench_norms: no CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    print(f"# {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, "
          f"kiln {kiln.version()}, bf16, TB/s")
    print("norm,rows,cols,kiln,torch,copy,kiln/torch,kiln/copy")
    rows = []
    for shape in a.shapes.split(","):
        R, C = (int(s) for s in shape.split("x"))
        g = torch.Generator(device=dev).manual_seed(R + C)
        x = torch.randn(R, C, device=dev, dtype=torch.bfloat16, generator=g)
        w = torch.randn(C, device=dev, dtype=torch.bfloat16, generator=g)
        b = torch.randn(C, device=dev, dtype=torch.bfloat16, generator=g)
        y = torch.empty_like(x)
        copy_ms = bench_ms(lambda: y.copy_(x))
        for name, ours, theirs, params in (
                ("rmsnorm", lambda: kiln.rms_norm(x, w, 1e-6),
                 lambda: F.rms_norm(x, (C,), w, 1e-6), 1),
                ("layernorm", lambda: kiln.layer_norm(x, w, b, 1e-5),
                 lambda: F.layer_norm(x, (C,), w, b, 1e-5), 2)):
            ours()  # tunes on first use
            nbytes = 2 * x.numel() * 2 + params * C * 2
            tbs = {n: nbytes / bench_ms(f) / 1e9
                   for n, f in (("kiln", ours), ("torch", theirs))}
            tbs["copy"] = 2 * x.numel() * 2 / copy_ms / 1e9
            rows.append(dict(norm=name, rows=R, cols=C, **tbs))
            print(f"{name},{R},{C},{tbs['kiln']:.2f},{tbs['torch']:.2f},"
                  f"{tbs['copy']:.2f},{tbs['kiln'] / tbs['torch']:.2f},"
                  f"{tbs['kiln'] / tbs['copy']:.2f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
