"""kiln.rms_norm and kiln.layer_norm: row norms written in kiln's DSL
(kernels/norm/RmsNorm.cpp), their schedule tuned per column count on the
first call and recorded for the GPU. Differentiable in x, weight and bias
since session 59 (the backward kernel writes dX and per-program partial
sums of dW and dB); bf16 or float32 CUDA tensors, read as they are (fp32
math; y in x's dtype), rows of any length (a tile of the power of two at or
above it, the columns past the row masked), launched on torch's current
stream. Under bf16 autocast y is bf16 and float32 x, weight and bias are
read without a cast (dx comes back float32): the residual stream of a
mixed-precision model costs no cast kernel per norm.

    y = kiln.rms_norm(x, weight, eps=1e-6)          # x: (..., cols)
    y = kiln.layer_norm(x, weight, bias, eps=1e-5)  # weight, bias may be None

Eager calls run from C++ where the extension is built (csrc/norms.cpp),
else through the autograd Function below; traced calls (torch.compile,
meta tensors, functorch) through torch.ops.kiln.row_norm, whose gradient
is torch.ops.kiln.row_norm_backward, with fake implementations.
"""
import math
from typing import Optional

import torch

from . import _cpp, _lib, ops
from .ops import (_contiguous, _plain, _plain_or_none, _raw_stream, _sm_count,
                  _traced, _under_autocast)

_TAKEN = (torch.bfloat16, torch.float32)


def _check(name, x, params, eps):
    """Raises TypeError/ValueError naming the argument; launches nothing."""
    args = (("x", x),) + params
    for arg, t in args:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"kiln.{name}: {arg} must be a torch.Tensor, got "
                            f"{type(t).__name__}")
        if t is x and (x.dim() < 1 or x.shape[-1] < 1):
            # First: an absent weight or bias has no stand-in then.
            raise ValueError(f"kiln.{name}: x must have a last dimension, "
                             f"got shape {tuple(x.shape)}")
    device = x.device
    for arg, t in args:
        if t.dtype not in _TAKEN:
            raise TypeError(f"kiln.{name}: {arg} has dtype {t.dtype}; kiln "
                            f"takes torch.bfloat16 or torch.float32")
    if len(params) == 2 and params[0][1].dtype != params[1][1].dtype:
        raise TypeError(f"kiln.{name}: weight has dtype {params[0][1].dtype}"
                        f", bias {params[1][1].dtype}; kiln takes them alike")
    for arg, t in args:
        if t.device.type not in ("cuda", "meta"):
            raise ValueError(f"kiln.{name}: {arg} is on {t.device}; kiln runs "
                             f"on CUDA tensors")
        if t is not x and t.device != device:
            raise ValueError(f"kiln.{name}: {arg} is on {t.device}, x on "
                             f"{device}")
    cols = x.shape[-1]
    for arg, t in params:
        if t.dim() != 1 or t.shape[0] != cols:
            raise ValueError(f"kiln.{name}: {arg} must have shape ({cols},), "
                             f"got {tuple(t.shape)}")
    if (type(eps) not in (int, float) or not math.isfinite(eps) or eps < 0):
        raise ValueError(f"kiln.{name}: eps must be a finite number >= 0, "
                         f"got {eps!r}")


def _forward(kind, rows, w, b, eps, y_bf16):
    y = torch.empty_like(rows, dtype=torch.bfloat16 if y_bf16 else None)
    if rows.shape[0]:
        _lib.row_norm(kind, rows, w, b, y, eps,
                      _raw_stream(rows.device.index), rows.device.index)
    return y


def _programs(rows, device):
    """The backward's programs (each walks its share of the row blocks and
    writes one row of partial dW / dB sums), as kiln tunes them."""
    return _lib.row_norm_backward_programs(rows, _sm_count(device))


class _RowNorm(torch.autograd.Function):
    """A norm of contiguous rows with its gradients: dX by the backward
    kernel, dW (dB) as the sums of its per-program partial rows."""

    @staticmethod
    def forward(ctx, kind, rows, w, b, eps, y_bf16):
        ctx.save_for_backward(rows, w)
        ctx.kind, ctx.eps = kind, eps
        return _forward(kind, rows, w, b, eps, y_bf16)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dx, sums = _backward(ctx.kind, x, w, dy, ctx.eps)
        return None, dx, sums[0], sums[1] if ctx.kind else None, None, None


def _backward(kind, x, w, dy, eps):
    """(dX in x's dtype, the rows of dW and dB summed (1 + kind, C), w's
    dtype); dy in the forward's y dtype."""
    dy = dy.contiguous()  # autograd may hand it expanded
    R, C = x.shape
    dx = torch.empty_like(x)
    # dW's (and dB's) partial rows in one buffer: one sum, one cast.
    partial = torch.empty(1 + kind, _programs(R, x.device), C,
                          device=x.device, dtype=torch.float32)
    if R:
        _lib.row_norm_backward(kind, x, w, dy, dx, partial[0], partial[-1],
                               eps, _raw_stream(x.device.index),
                               x.device.index)
    else:
        partial.zero_()
    return dx, partial.sum(1).to(w.dtype)


@torch.library.custom_op("kiln::row_norm", mutates_args=(),
                         device_types="cuda")
def _row_norm_op(rows: torch.Tensor, w: torch.Tensor,
                 b: Optional[torch.Tensor], kind: int,
                 eps: float, y_bf16: bool) -> torch.Tensor:
    return _forward(kind, rows, w, b, eps, y_bf16)


@_row_norm_op.register_fake
def _(rows, w, b, kind, eps, y_bf16):
    return torch.empty_like(rows, dtype=torch.bfloat16 if y_bf16 else None)


@torch.library.custom_op("kiln::row_norm_backward", mutates_args=(),
                         device_types="cuda")
def _row_norm_backward_op(dy: torch.Tensor, rows: torch.Tensor,
                          w: torch.Tensor, kind: int,
                          eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _backward(kind, rows, w, dy, eps)


@_row_norm_backward_op.register_fake
def _(dy, rows, w, kind, eps):
    return torch.empty_like(rows), w.new_empty(1 + kind, rows.shape[1])


def _op_setup(ctx, inputs, output):
    rows, w, _, kind, eps, _ = inputs
    ctx.save_for_backward(rows, w)
    ctx.kind, ctx.eps = kind, eps


def _op_backward(ctx, dy):
    rows, w = ctx.saved_tensors
    dx, sums = torch.ops.kiln.row_norm_backward(dy, rows, w, ctx.kind,
                                                ctx.eps)
    return dx, sums[0], sums[1] if ctx.kind else None, None, None, None


_row_norm_op.register_autograd(_op_backward, setup_context=_op_setup)


def _run(kind, name, x, w, b, eps, y_bf16):
    _check(name, x, (("weight", w),) + ((("bias", b),) if kind else ()), eps)
    rows = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
    op = "kiln." + name
    if not rows.is_contiguous():
        rows = _contiguous(op, "x", rows)
    w = w if w.is_contiguous() else _contiguous(op, "weight", w)
    if b is not None and not b.is_contiguous():
        b = _contiguous(op, "bias", b)
    if _traced() or x.device.type == "meta" or not _plain(x):
        y = torch.ops.kiln.row_norm(rows, w, b, kind, float(eps), y_bf16)
    elif torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or
                                    (b is not None and b.requires_grad)):
        y = _RowNorm.apply(kind, rows, w, b, float(eps), y_bf16)
    else:
        y = _forward(kind, rows, w, b, float(eps), y_bf16)
    return y if y.dim() == x.dim() else y.reshape(x.shape)


def _fast(kind, x, w, b, eps, y_bf16):
    """The common case (a contiguous x, contiguous parameters on its device,
    bf16 or float32) checked and launched in C++, with a gradient through a
    C++ Function (csrc/norms.cpp); None otherwise."""
    if (_plain(x) and _plain(w) and _plain_or_none(b) and type(eps) is float and
            x.is_cuda and (cpp := _cpp.module()) is not None):
        return cpp.row_norm(kind, x, w, b, eps, y_bf16)
    return None


def _norm_inputs(x, *params):
    """(x, *params, y_bf16): under bf16 autocast y is bf16 and float32
    tensors stay as they are (the kernels read them; no cast kernel), float16
    ones (and parameters whose dtypes differ) are cast as autocast casts;
    elsewhere as given, y in x's dtype."""
    if not ops._autocast_bf16():
        return (x,) + params + (False,)
    ts = (x,) + params
    half = [isinstance(t, torch.Tensor) and t.dtype == torch.float16
            for t in ts]
    ps = [t for t in params if isinstance(t, torch.Tensor)]
    if len(ps) == 2 and ps[0].dtype != ps[1].dtype:
        half[1:] = [True] * len(params)
    if any(half):
        cast = _under_autocast(*(t if h else None for t, h in zip(ts, half)))
        ts = tuple(c if h else t for t, c, h in zip(ts, cast, half))
    return ts + (True,)


_constants = {}


def _constant(x, value, dtype):
    """A (cols,) of `value` on x's device, standing in for an absent weight
    (1) or bias (0): x·1 + 0 is exact, so the kernels need no variant
    without them. Kept per (device, cols, value, dtype) for eager calls; a
    trace makes its own."""
    cols = x.shape[-1]
    if _traced() or not _plain(x) or x.device.type == "meta":
        return torch.full((cols,), value, dtype=dtype, device=x.device)
    key = (x.device, cols, value, dtype)
    t = _constants.get(key)
    if t is None:
        if len(_constants) > 64:
            _constants.clear()
        t = _constants[key] = torch.full((cols,), value, dtype=dtype,
                                         device=x.device)
    return t


def _defaults(x, weight, bias, kind):
    """weight (and, for LayerNorm, bias) where the caller gave None, as
    nn.RMSNorm / nn.LayerNorm without elementwise_affine or bias do: in the
    dtype of the one given (the kernels take them alike), else bf16."""
    if isinstance(x, torch.Tensor) and x.dim() >= 1:
        given = next((t.dtype for t in (weight, bias) if
                      isinstance(t, torch.Tensor) and t.dtype in _TAKEN),
                     torch.bfloat16)
        if weight is None:
            weight = _constant(x, 1.0, given)
        if kind and bias is None:
            bias = _constant(x, 0.0, given)
    return weight, bias


def rms_norm(x, weight=None, eps=1e-6):
    """x / sqrt(mean(x², last dim) + eps) * weight, as
    torch.nn.functional.rms_norm(x, (cols,), weight, eps); weight None: 1.
    x and weight bf16 or float32, y in x's dtype; under bf16 autocast y is
    bf16 and float32 x and weight are read as they are."""
    x, weight, y_bf16 = _norm_inputs(x, weight)
    if weight is None:
        weight, _ = _defaults(x, weight, None, 0)
    y = None if _traced() else _fast(0, x, weight, None, eps, y_bf16)
    return y if y is not None else _run(0, "rms_norm", x, weight, None, eps,
                                        y_bf16)


def layer_norm(x, weight=None, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dimension,
    as torch.nn.functional.layer_norm(x, (cols,), weight, bias, eps);
    weight None: 1, bias None: 0. x, weight and bias bf16 or float32 (weight
    and bias alike), y in x's dtype; under bf16 autocast y is bf16 and
    float32 tensors are read as they are."""
    x, weight, bias, y_bf16 = _norm_inputs(x, weight, bias)
    if weight is None or bias is None:
        weight, bias = _defaults(x, weight, bias, 1)
    y = None if _traced() else _fast(1, x, weight, bias, eps, y_bf16)
    return y if y is not None else _run(1, "layer_norm", x, weight, bias, eps,
                                        y_bf16)
