"""kiln.attention_qkvpacked: attention on one (B, N, 3, H, D) tensor, as a
projection to q, k and v makes it (flash_attn_qkvpacked_func's layout).

The forward reads q, k and v as views of it (no copies); the backward writes
dQ, dK and dV into one (B, N, 3, H, D) gradient, so autograd has no
per-slice gradients to scatter and add (for three selects of the packed
tensor: a zero-filled copy of it for each, then two additions; for unbind, a
stack). Registered as the custom ops

  kiln::attention_qkvpacked_forward(qkv, causal, scale) -> (o, lse)
  kiln::attention_qkvpacked_backward(grad_o, qkv, o, lse, causal, scale)
      -> dqkv

with fake implementations, as kiln.attention's are.
"""
import math

import torch

from . import _cpp, _lib, ops


def _views(qkv):
    return qkv.unbind(2)


@torch.library.custom_op("kiln::attention_qkvpacked_forward", mutates_args=(),
                         device_types="cuda")
def _forward(qkv: torch.Tensor, causal: bool,
             scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, v = _views(qkv)
    return ops._forward_body(q, k, v, causal, scale, True)


@_forward.register_fake
def _(qkv, causal, scale):
    B, N, _, H, D = qkv.shape
    return (qkv.new_empty((B, N, H, D)),
            qkv.new_empty((B, H, N), dtype=torch.float32))


@torch.library.custom_op("kiln::attention_qkvpacked_backward", mutates_args=(),
                         device_types="cuda")
def _backward(grad_o: torch.Tensor, qkv: torch.Tensor, o: torch.Tensor,
              lse: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    return _backward_body(grad_o, qkv, o, lse, causal, scale)


def _backward_body(grad_o, qkv, o, lse, causal, scale, checked=False):
    B, N, _, H, D = qkv.shape
    if grad_o.stride(-1) != 1:
        grad_o = grad_o.contiguous()
    dqkv = torch.empty_like(qkv, memory_format=torch.contiguous_format)
    ws = torch.empty(_lib.workspace_elements(B, H, N, D), dtype=torch.float32,
                     device=qkv.device)
    (q, k, v), (dq, dk, dv) = _views(qkv), _views(dqkv)
    _lib.backward(q, k, v, o, grad_o, lse, ws, dq, dk, dv, causal, scale, True,
                  ops._stream(qkv), checked)
    return dqkv


@_backward.register_fake
def _(grad_o, qkv, o, lse, causal, scale):
    return qkv.new_empty(qkv.shape)


def _setup_context(ctx, inputs, output):
    qkv, causal, scale = inputs
    o, lse = output
    ctx.save_for_backward(qkv, o, lse)
    ctx.causal, ctx.scale = causal, scale
    ctx.mark_non_differentiable(lse)


def _autograd_backward(ctx, grad_o, grad_lse):
    if grad_o is None:  # not materialized: O took no part in the loss
        return None, None, None
    qkv, o, lse = ctx.saved_tensors
    if type(grad_o) is torch.Tensor and ops._dispatch_free(qkv, qkv, qkv):
        return (_backward_body(grad_o, qkv, o, lse, ctx.causal, ctx.scale,
                               getattr(ctx, "checked", False)), None, None)
    return (torch.ops.kiln.attention_qkvpacked_backward(
        grad_o, qkv, o, lse, ctx.causal, ctx.scale), None, None)


_forward.register_autograd(_autograd_backward, setup_context=_setup_context)


class _EagerPacked(torch.autograd.Function):
    """Eager autograd without the dispatcher (as ops._EagerAttention)."""

    @staticmethod
    def forward(ctx, qkv, causal, scale):  # from attention_qkvpacked()
        q, k, v = _views(qkv)
        o, lse = ops._forward_body(q, k, v, causal, scale, True, True)
        _setup_context(ctx, (qkv, causal, scale), (o, lse))
        ctx.checked = True
        ctx.set_materialize_grads(False)  # as ops._EagerAttention
        return o, lse

    @staticmethod
    def backward(ctx, grad_o, grad_lse):
        return _autograd_backward(ctx, grad_o, grad_lse)


def attention_qkvpacked(qkv, *, causal=False, scale=None, return_lse=False):
    """kiln.attention on q, k, v packed as qkv (B, N, 3, H, D): q =
    qkv[:, :, 0], k = qkv[:, :, 1], v = qkv[:, :, 2] (the "bshd" layout).

    Returns O (B, N, H, D), and with return_lse=True the fp32 (B, H, N)
    logsumexp. The gradient of qkv comes out as one tensor. Same kernels,
    dtypes, head dims and options as kiln.attention.
    """
    ops._need_bool("kiln.attention_qkvpacked", "return_lse", return_lse)
    if not isinstance(qkv, torch.Tensor):
        raise TypeError(f"kiln.attention_qkvpacked: qkv must be a torch.Tensor, "
                        f"got {type(qkv).__name__}")
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise ValueError(f"kiln.attention_qkvpacked: qkv must be (batch, seq, "
                         f"3, heads, head_dim), got shape {tuple(qkv.shape)}")
    q, k, v = _views(qkv)
    ops._check(q, k, v, causal, scale, "bshd", "kiln.attention_qkvpacked")
    s = float(scale) if scale is not None else 1.0 / math.sqrt(qkv.shape[-1])
    if not ops._eager(qkv, qkv, qkv):
        o, lse = torch.ops.kiln.attention_qkvpacked_forward(qkv, causal, s)
    elif (cpp := _cpp.module()) is not None:  # the same launches, from C++
        o, lse = cpp.attention_qkvpacked(qkv, causal, s)
    elif torch.is_grad_enabled() and qkv.requires_grad:
        o, lse = _EagerPacked.apply(qkv, causal, s)
    else:
        o, lse = ops._forward_body(q, k, v, causal, s, True, True)
    return (o, lse) if return_lse else o
