"""kiln: flash attention from kiln's DSL, JIT-compiled, as a PyTorch op.

    import kiln
    o = kiln.attention(q, k, v, causal=True)          # (B, H, N, D)
    o = kiln.attention(q, k, v, layout="bshd")         # (B, N, H, D)

See kiln.attention's docstring, and `python3 -m kiln.bench` for kiln beside
SDPA's flash and cuDNN backends on the same tensors.
"""
from .ops import attention
from ._lib import cache_stats, version

__all__ = ["attention", "cache_stats", "version"]
