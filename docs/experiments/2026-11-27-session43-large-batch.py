import torch, torch.nn.functional as F, kiln
torch.manual_seed(0)
for B, H, N, D, causal in ((4100, 16, 9, 64, False), (4100, 16, 200, 64, False), (70000, 1, 64, 128, True)):
    q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    o = kiln.attention(q, k, v, causal=causal)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    do = torch.randn_like(o)
    g = torch.autograd.grad(o, (q, k, v), do)
    gr = torch.autograd.grad(ref, (q, k, v), do.float())
    err = lambda a, b: ((a.float() - b).abs().max() / b.abs().max()).item()
    print(f"B={B} H={H} N={N} D={D} causal={causal}: O rel err {err(o, ref):.2e}; dQ {err(g[0], gr[0]):.2e} dK {err(g[1], gr[1]):.2e} dV {err(g[2], gr[2]):.2e}")
