"""Loss curves of gpt.json (train.py's output) as a PNG: each backend's
per-step loss, faint, and its 25-step mean; below, each 25-step mean minus
SDPA flash's, against the band of SDPA flash's step-to-step noise.

    python3 examples/gpt/plot.py gpt.json loss.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src, dst = sys.argv[1], sys.argv[2]
r = json.load(open(src))
fig, (ax, gap) = plt.subplots(2, 1, figsize=(8, 6.5), dpi=120, sharex=True,
                              gridspec_kw=dict(height_ratios=[2, 1]))
smooth = lambda xs: [sum(xs[max(0, j - 24):j + 1]) / (j + 1 - max(0, j - 24))
                     for j in range(len(xs))]
ref = smooth(r["results"]["sdpa_flash"]["losses"])
noise = r["results"]["sdpa_flash"].get("noise", 0)
gap.axhspan(-noise, noise, color="0.85", label="SDPA flash's step-to-step noise")
for i, (name, res) in enumerate(r["results"].items()):
    losses = res["losses"]
    mean = smooth(losses)
    gap.plot(range(50, len(mean)), [m - f for m, f in zip(mean[50:], ref[50:])],
             color=f"C{i}", label=name)
    ax.plot(losses, color=f"C{i}", alpha=0.25, linewidth=0.8)
    ax.plot(mean, color=f"C{i}", linewidth=1.8,
            label=f"{name}: {res['tokens_per_s'] / 1e3:.0f}k tok/s, "
                  f"{res['peak_mib']:.0f} MiB peak")
a = r["args"]
ax.set(title=f"GPT 6x768, 12 heads of 64, context {a['context']}, batch {a['batch']}: "
             f"{r['device']}", ylabel="loss (bytes, cross-entropy)", ylim=(1.5, 4.0))
ax.legend()
ax.grid(alpha=0.3)
gap.set(xlabel="step", ylabel="25-step mean - SDPA flash's")
gap.legend(fontsize=8, ncol=2)
gap.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(dst)
print(dst)
