"""kiln.attention beside SDPA cuDNN and flash, samples in turn, in microseconds:
python3 s49peers.py BxHxNqxNkxD ... (non-causal, bf16, standard normal)."""
import sys
import torch
import kiln
from kiln.bench import PEERS, bench_interleaved_ms

print("D,B,H,Nq,Nk,kiln_us,cudnn_us,flash_us,kiln/cudnn,kiln/flash (as speed)")
for spec in sys.argv[1:]:
    B, H, Nq, Nk, D = (int(x) for x in spec.split("x"))
    g = torch.Generator(device="cuda").manual_seed(B * 7 + Nk)
    q = torch.randn(B, H, Nq, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(B, H, Nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    names = ["kiln", "sdpa_cudnn", "sdpa_flash"]
    fns = {n: (lambda f=PEERS[n]: f(q, k, v, False)) for n in names}
    ms = bench_interleaved_ms(fns)
    us = [ms[n] * 1000 for n in names]
    print(f"{D},{B},{H},{Nq},{Nk},{us[0]:.1f},{us[1]:.1f},{us[2]:.1f},{us[1]/us[0]:.3f},{us[2]/us[0]:.3f}", flush=True)
