"""kiln: flash attention from kiln's DSL, JIT-compiled, as a PyTorch op.

    import kiln
    o = kiln.attention(q, k, v, causal=True)          # (B, H, N, D)
    o = kiln.attention(q, k, v, layout="bshd")         # (B, N, H, D)
    o = kiln.attention_qkvpacked(qkv, causal=True)    # qkv (B, N, 3, H, D)

Also kiln.rms_norm, kiln.layer_norm, kiln.rotary, kiln.cross_entropy and
kiln.linear (DSL kernels tuned on first use).
See kiln.attention's docstring, and `python3 -m kiln.bench` for kiln beside
SDPA's flash and cuDNN backends on the same tensors.
"""
from .ops import attention
from .packed import attention_qkvpacked
from .norms import layer_norm, rms_norm
from .fused import cross_entropy, rotary
from .gemm import linear
from ._lib import cache_stats, version

__all__ = ["attention", "attention_qkvpacked", "layer_norm", "rms_norm", "rotary", "cross_entropy",
           "linear", "cache_stats", "version"]
