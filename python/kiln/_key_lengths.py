"""kiln.attention's key_lengths: each batch attends to its own number of
keys of a KV cache (causal: its queries the last of them), forward only.
The C++ entry checks and launches the common case; this module the rest,
with its own custom op for torch.compile."""
import math

import torch

from . import _cpp, ops


@torch.library.custom_op("kiln::attention_forward_key_lengths",
                         mutates_args=(), device_types="cuda")
def _forward_key_lengths(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         key_lengths: torch.Tensor, causal: bool, scale: float,
                         bshd: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return ops._forward_body(q, k, v, causal, scale, bshd,
                             key_lengths=key_lengths)


@_forward_key_lengths.register_fake
def _(q, k, v, key_lengths, causal, scale, bshd):
    B, H, Nq, _ = ops._dims(q, bshd)
    return q.new_empty(q.shape), q.new_empty((B, H, Nq), dtype=torch.float32)


def check(q, k, v, key_lengths, bshd, op="kiln.attention"):
    """key_lengths' own checks (after _check's of q, k and v)."""
    if not isinstance(key_lengths, torch.Tensor):
        raise TypeError(f"{op}: key_lengths must be a torch.Tensor, got "
                        f"{type(key_lengths).__name__}")
    B = ops._dims(q, bshd)[0]
    if key_lengths.dtype != torch.int32:
        raise TypeError(f"{op}: key_lengths has dtype {key_lengths.dtype}; "
                        f"it must be torch.int32")
    if key_lengths.dim() != 1 or key_lengths.shape[0] != B:
        raise ValueError(f"{op}: key_lengths must be 1-D with one length "
                         f"per batch ({B}), got shape "
                         f"{tuple(key_lengths.shape)}")
    if key_lengths.device != q.device:
        raise ValueError(f"{op}: key_lengths is on {key_lengths.device}, q "
                         f"on {q.device}")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise ValueError(f"{op}: key_lengths has no backward (it serves "
                         f"decoding); call it under torch.no_grad() or "
                         f"torch.inference_mode(), or detach q, k and v")


def attention(q, k, v, key_lengths, causal, scale, layout, return_lse):
    """kiln.attention(..., key_lengths=key_lengths), its other arguments
    not yet checked."""
    # The common case checked and launched in C++, as kiln.attention's.
    if (type(causal) is bool and type(key_lengths) is torch.Tensor and
            ops._cpp_path_may_take(q, k, v, scale, layout) and
            (cpp := _cpp.module()) is not None):
        r = cpp.attention_key_lengths_checked(q, k, v, key_lengths, causal,
                                              scale, layout == "bshd")
        if r is not None:
            return tuple(r) if return_lse else r[0]
    ops._check(q, k, v, causal, scale, layout)
    bshd = layout == "bshd"
    check(q, k, v, key_lengths, bshd)
    s = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    if ops._eager(q, k, v):
        k, v = ops._aligned_copy("k", k), ops._aligned_copy("v", v)
        o, lse = ops._forward_body(q, k, v, causal, s, bshd, checked=True,
                                   key_lengths=key_lengths)
    else:
        o, lse = torch.ops.kiln.attention_forward_key_lengths(
            q, k, v, key_lengths, causal, s, bshd)
    return (o, lse) if return_lse else o
