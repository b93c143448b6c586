"""Draws kiln compare's plots from its compare.json with matplotlib:
attention-time (ms against N, each lowering, causal dashed) and
attention-memory (peak MiB against N, non-causal), D=128, as PNG and SVG.

    python3 scripts/plot_compare.py compare/compare.json compare/
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src, out = sys.argv[1], sys.argv[2]
data = json.load(open(src))
meta = data.get("meta", {"batch": 1, "heads": 16, "dtype": "bf16"})
rows = [r for r in data["rows"] if r["D"] == 128]
where = f"D=128, B={meta['batch']} H={meta['heads']} {meta['dtype']}" + (
    f", {meta['device']}" if meta.get("device") else "")
colors = {"unfused": "C3", "elementwise": "C1", "fused": "C0"}


def series(lowering, causal, key):
    pts = sorted((r["N"], r[key]) for r in rows
                 if r["lowering"] == lowering and r["causal"] == causal and not r["oom"])
    return [p[0] for p in pts], [p[1] for p in pts]


def oom(lowering, causal):
    return sorted(r["N"] for r in rows
                  if r["lowering"] == lowering and r["causal"] == causal and r["oom"])


def finish(fig, ax, name, ylabel, title):
    ax.set(xscale="log", yscale="log", xlabel="sequence length N", ylabel=ylabel,
           title=title)
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(out, f"{name}.{ext}"))
    print(os.path.join(out, name + ".{png,svg}"))


fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
for lowering, color in colors.items():
    for causal in (False, True):
        x, y = series(lowering, causal, "ms")
        if x:
            ax.plot(x, y, color=color, linestyle="--" if causal else "-", marker=".",
                    label=lowering + (" causal" if causal else ""))
finish(fig, ax, "attention-time", "ms per call", f"attention time, {where}")

fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
for lowering, color in colors.items():
    x, y = series(lowering, False, "peak_bytes")
    if x:
        # Unfused and elementwise hold the same two N x N buffers: dashed so
        # that both show.
        ax.plot(x, [b / 2**20 for b in y], color=color, marker=".",
                linestyle="--" if lowering == "elementwise" else "-", label=lowering)
out_of_memory = oom("unfused", False)
title = f"attention peak memory, {where}" + (
    f"\nunfused runs out of memory at N={out_of_memory[0]}" if out_of_memory else "")
finish(fig, ax, "attention-memory", "MiB", title)
