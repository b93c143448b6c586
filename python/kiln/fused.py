"""kiln's fused kernels of a transformer beside attention, from PyTorch:
rotary embedding, softmax cross-entropy (with its backward) and a linear
layer with bias and activation in the GEMM's epilogue (kiln/gemm.py). Each
is a DSL kernel (kernels/rotary, kernels/loss, kernels/gemm) whose schedule
is tuned on the first call for its class of problem and recorded for the
GPU; launched on torch's current stream. bf16 CUDA tensors.

    q = kiln.rotary(q, cos, sin)                    # (B, N, H, D), autograd
    loss = kiln.cross_entropy(logits, labels)       # mean, autograd
    y = kiln.linear(x, w_t, bias, activation="gelu")  # x @ w_t + bias, GELU

Eager calls run from C++ where the extension is built (csrc/rotary.cpp,
csrc/cross_entropy.cpp), else through the autograd Functions below; traced
calls (torch.compile, meta tensors, functorch) through torch.ops.kiln.rotary
and torch.ops.kiln.cross_entropy_rows (with its backward op), with fake
implementations.
"""
import operator
from typing import Optional

import torch

from . import _cpp, _lib
from .ops import (_log_copy, _plain, _plain_or_none, _stream, _traced,
                  _under_autocast)

_ON = ("cuda", "meta")  # where a traced call's tensors may be


def _need_tensor(fn, name, t, dtypes, device=None, types=("cuda",)):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"kiln.{fn}: {name} must be a torch.Tensor, got "
                        f"{type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"kiln.{fn}: {name} has dtype {t.dtype}; kiln takes "
                        + " or ".join(str(d) for d in dtypes))
    if t.device.type not in types:
        raise ValueError(f"kiln.{fn}: {name} is on {t.device}; kiln runs on "
                         f"CUDA tensors")
    if device is not None and t.device != device:
        raise ValueError(f"kiln.{fn}: {name} is on {t.device}, the first "
                         f"tensor on {device}")


_positions = {}


def _default_positions(device, batch, n):
    """0..n-1 for each of `batch` sequences, one after the other (i32)."""
    key = (device, batch, n)
    p = _positions.get(key)
    if p is None:
        if len(_positions) > 64:
            _positions.clear()
        p = _positions[key] = torch.arange(
            n, device=device, dtype=torch.int32).repeat(batch)
    return p


def _needs_copy(x):
    """Whether x's dimensions 0 and 1 do not merge or its D is strided: the
    kernel then cannot view x as (heads, tokens, D) without a copy."""
    return x.stride(0) != x.shape[1] * x.stride(1) or x.stride(3) != 1


def _rotary_run(x, cos, sin, positions, bshd, inverse):
    """The kernel on x seen as (heads, tokens, D)."""
    B = x.shape[0]
    if _needs_copy(x):
        x = x.contiguous()
    if bshd:  # (B, N, H, D): tokens are (b, n)
        N, H, D = x.shape[1], x.shape[2], x.shape[3]
        seen = x.view(B * N, H, D).transpose(0, 1)
        pos = (_default_positions(x.device, B, N) if positions is None else
               positions.to(torch.int32).repeat(B))
    else:  # (B, H, N, D): tokens are n, heads (b, h)
        H, N, D = x.shape[1], x.shape[2], x.shape[3]
        seen = x.view(B * H, N, D)
        pos = (_default_positions(x.device, 1, N) if positions is None else
               positions.to(torch.int32).contiguous())
    y = torch.empty_like(x)
    ys = y.view(B * N, H, D).transpose(0, 1) if bshd else y.view(B * H, N, D)
    if x.numel():
        _op("rotary", int(inverse),
            {"X": seen, "Y": ys, "Pos": pos, "Cos": cos, "Sin": sin}, x,
            "kiln.rotary")
    return y


class _Rotary(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin, positions, bshd):
        ctx.save_for_backward(cos, sin, positions)
        ctx.bshd = bshd
        return _rotary_run(x, cos, sin, positions, bshd, False)

    @staticmethod
    def backward(ctx, dy):
        cos, sin, positions = ctx.saved_tensors
        # The rotation is orthogonal: its gradient rotates back.
        return (_rotary_run(dy, cos, sin, positions, ctx.bshd, True), None,
                None, None, None)


@torch.library.custom_op("kiln::rotary", mutates_args=(), device_types="cuda")
def _rotary_op(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               positions: Optional[torch.Tensor], bshd: bool,
               inverse: bool) -> torch.Tensor:
    return _rotary_run(x, cos, sin, positions, bshd, inverse)


@_rotary_op.register_fake
def _(x, cos, sin, positions, bshd, inverse):
    return torch.empty_like(x.contiguous() if _needs_copy(x) else x)


def _rotary_setup(ctx, inputs, output):
    _, cos, sin, positions, ctx.bshd, ctx.inverse = inputs
    ctx.save_for_backward(cos, sin, positions)


def _rotary_backward(ctx, dy):
    cos, sin, positions = ctx.saved_tensors
    return (torch.ops.kiln.rotary(dy, cos, sin, positions, ctx.bshd,
                                  not ctx.inverse), None, None, None, None,
            None)


_rotary_op.register_autograd(_rotary_backward, setup_context=_rotary_setup)


def rotary(x, cos, sin, positions=None, *, layout="bshd"):
    """Rotary position embedding, the rotate-half form (GPT-NeoX, Llama):
    with x1, x2 the halves of each head's vector and c, s the rows of cos
    and sin at the token's position, (x1·c − x2·s, x2·c + x1·s).

    x: (B, N, H, D) for layout "bshd", (B, H, N, D) for "bhsd", bf16, D a
    power of two >= 16; cos, sin: (P, D/2) float32; positions: (N,) integers
    below P (default 0..N-1, which needs P >= N), the same for every
    sequence of the batch. A given position outside [0, P) reads cos = sin =
    0 (its token comes out 0): its values are on the GPU, unchecked.
    Differentiable in x. Under bf16 autocast a float32 x is cast to bf16
    first."""
    (x,) = _under_autocast(x)  # cos and sin stay float32
    # The common case checked and launched in C++ (csrc/rotary.cpp; with a
    # gradient a C++ Function): ~47 us of host time a call from here.
    if (not _traced() and _plain(x) and _plain(cos) and _plain(sin) and
            _plain_or_none(positions) and
            (layout == "bshd" or layout == "bhsd") and x.is_cuda and
            (cpp := _cpp.module()) is not None):
        y = cpp.rotary(x, cos, sin, positions, layout == "bshd")
        if y is not None:
            return y
    _need_tensor("rotary", "x", x, (torch.bfloat16,), types=_ON)
    for name, t in (("cos", cos), ("sin", sin)):
        _need_tensor("rotary", name, t, (torch.float32,), x.device, _ON)
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"kiln.rotary: layout must be 'bshd' or 'bhsd', got "
                         f"{layout!r}")
    if x.dim() != 4:
        raise ValueError(f"kiln.rotary: x must be 4-D, got shape "
                         f"{tuple(x.shape)}")
    D = x.shape[3]
    N = x.shape[1] if layout == "bshd" else x.shape[2]
    if D < 16 or D & (D - 1):
        raise ValueError(f"kiln.rotary: the head dimension must be a power of "
                         f"two >= 16, got {D}")
    for name, t in (("cos", cos), ("sin", sin)):
        if t.dim() != 2 or t.shape[1] != D // 2 or not t.is_contiguous():
            raise ValueError(f"kiln.rotary: {name} must be contiguous (P, "
                             f"{D // 2}), got shape {tuple(t.shape)}")
    if cos.shape != sin.shape:
        raise ValueError("kiln.rotary: cos and sin must have one shape")
    if positions is None and cos.shape[0] < N:
        raise ValueError(f"kiln.rotary: cos and sin have {cos.shape[0]} rows,"
                         f" fewer than the {N} positions 0..{N - 1} of x's "
                         f"sequence (positions=None)")
    if positions is not None:
        _need_tensor("rotary", "positions", positions,
                     (torch.int32, torch.int64), x.device, _ON)
        if tuple(positions.shape) != (N,):
            raise ValueError(f"kiln.rotary: positions must have shape ({N},),"
                             f" got {tuple(positions.shape)}")
    if _needs_copy(x):
        _log_copy("kiln.rotary", "x", f"strides {tuple(x.stride())}",
                  "copied to contiguous memory first",
                  "cannot be seen as (heads, tokens, D) without a copy")
    if _traced() or x.device.type == "meta" or not _plain(x):
        return torch.ops.kiln.rotary(x, cos, sin, positions,
                                     layout == "bshd", False)
    if torch.is_grad_enabled() and x.requires_grad:
        return _Rotary.apply(x, cos, sin, positions, layout == "bshd")
    return _rotary_run(x, cos, sin, positions, layout == "bshd", False)


def _ce_rows(logits, labels, ignore_index):
    """Each row's loss and logsumexp (fp32)."""
    R = logits.shape[0]
    lse = torch.empty(R, device=logits.device, dtype=torch.float32)
    loss = torch.empty(R, device=logits.device, dtype=torch.float32)
    if R:
        _op("cross_entropy_fwd", ignore_index,
            {"X": logits, "Labels": labels, "LSE": lse, "Loss": loss},
            logits, "kiln.cross_entropy")
    return loss, lse


def _ce_backward(logits, labels, lse, ignore_index, tensors):
    """dLogits; `tensors` hold Scale (and DLoss per row)."""
    tensors.update(X=logits, Labels=labels, LSE=lse)
    dx = tensors["DX"] = torch.empty_like(logits)
    if logits.shape[0]:
        _op("cross_entropy_bwd", ignore_index, tensors, logits,
            "kiln.cross_entropy")
    return dx


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, ignore_index, reduction):
        loss, lse = _ce_rows(logits, labels, ignore_index)
        count = None
        if reduction == "mean":
            count = (labels != ignore_index).sum().to(torch.float32)
            out = loss.sum() / count
        else:
            out = loss.sum() if reduction == "sum" else loss
        ctx.save_for_backward(logits, labels, lse, count)
        ctx.ignore_index, ctx.reduction = ignore_index, reduction
        return out

    @staticmethod
    def backward(ctx, grad):
        logits, labels, lse, count = ctx.saved_tensors
        tensors = {}
        if ctx.reduction == "none":
            tensors["DLoss"] = grad.to(torch.float32).contiguous()
            tensors["Scale"] = torch.ones(1, device=grad.device,
                                          dtype=torch.float32)
        else:
            scale = grad.to(torch.float32).reshape(1)
            tensors["Scale"] = scale / count if count is not None else scale
        return (_ce_backward(logits, labels, lse, ctx.ignore_index, tensors),
                None, None, None)


@torch.library.custom_op("kiln::cross_entropy_rows", mutates_args=(),
                         device_types="cuda")
def _ce_rows_op(logits: torch.Tensor, labels: torch.Tensor,
                ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _ce_rows(logits, labels, ignore_index)


@_ce_rows_op.register_fake
def _(logits, labels, ignore_index):
    R = logits.shape[0]
    return (logits.new_empty(R, dtype=torch.float32),
            logits.new_empty(R, dtype=torch.float32))


@torch.library.custom_op("kiln::cross_entropy_rows_backward",
                         mutates_args=(), device_types="cuda")
def _ce_rows_backward_op(dloss: torch.Tensor, logits: torch.Tensor,
                         labels: torch.Tensor, lse: torch.Tensor,
                         ignore_index: int) -> torch.Tensor:
    return _ce_backward(logits, labels, lse, ignore_index, {
        "DLoss": dloss.to(torch.float32).contiguous(),
        "Scale": torch.ones(1, device=dloss.device, dtype=torch.float32)})


@_ce_rows_backward_op.register_fake
def _(dloss, logits, labels, lse, ignore_index):
    return torch.empty_like(logits)


def _ce_setup(ctx, inputs, output):
    logits, labels, ctx.ignore_index = inputs
    ctx.save_for_backward(logits, labels, output[1])


def _ce_rows_backward(ctx, dloss, dlse):
    logits, labels, lse = ctx.saved_tensors
    return (torch.ops.kiln.cross_entropy_rows_backward(
        dloss, logits, labels, lse, ctx.ignore_index), None, None)


_ce_rows_op.register_autograd(_ce_rows_backward, setup_context=_ce_setup)


_REDUCTIONS = {"mean": 0, "sum": 1, "none": 2}


def cross_entropy(logits, labels, ignore_index=-100, reduction="mean"):
    """Softmax cross-entropy of bf16 logits (R, V) against int64 labels (R,),
    as torch.nn.functional.cross_entropy (labels equal to ignore_index count
    for nothing; reduction "mean", "sum" or "none"). One pass over each row
    (an online logsumexp) forward, one backward; differentiable in logits.
    Under bf16 autocast float32 logits are cast to bf16 first (torch's
    autocast would run cross_entropy in float32)."""
    (logits,) = _under_autocast(logits)
    # The common case checked and run in C++ (csrc/cross_entropy.cpp).
    if (not _traced() and _plain(logits) and _plain(labels) and
            type(ignore_index) is int and -2**63 <= ignore_index < 2**63 and
            type(reduction) is str and reduction in _REDUCTIONS and
            logits.is_cuda and (cpp := _cpp.module()) is not None):
        out = cpp.cross_entropy(logits, labels, ignore_index,
                                _REDUCTIONS[reduction])
        if out is not None:
            return out
    _need_tensor("cross_entropy", "logits", logits, (torch.bfloat16,),
                 types=_ON)
    _need_tensor("cross_entropy", "labels", labels, (torch.int64,),
                 logits.device, _ON)
    if logits.dim() != 2 or logits.shape[1] < 1:
        raise ValueError(f"kiln.cross_entropy: logits must be (R, V), got "
                         f"shape {tuple(logits.shape)}")
    if tuple(labels.shape) != (logits.shape[0],):
        raise ValueError(f"kiln.cross_entropy: labels must have shape "
                         f"({logits.shape[0]},), got {tuple(labels.shape)}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"kiln.cross_entropy: reduction must be 'mean', "
                         f"'sum' or 'none', got {reduction!r}")
    # An integer (int() of 1.5 would ignore the labels equal to 1 while the
    # mean counted them).
    if isinstance(ignore_index, bool) or not hasattr(type(ignore_index),
                                                     "__index__"):
        raise TypeError(f"kiln.cross_entropy: ignore_index must be an int, got "
                        f"{ignore_index!r}")
    ignore_index = operator.index(ignore_index)
    if not -2**63 <= ignore_index < 2**63:
        raise ValueError(f"kiln.cross_entropy: ignore_index must fit in 64 "
                         f"bits, got {ignore_index}")
    if logits.stride(1) != 1:
        _log_copy("kiln.cross_entropy", "logits",
                  f"strides {tuple(logits.stride())}",
                  "copied to contiguous memory first",
                  "has no unit column stride")
        logits = logits.contiguous()
    if _traced() or logits.device.type == "meta" or not _plain(logits):
        # Each row's loss from the op, reduced by torch (traced with it).
        loss, _ = torch.ops.kiln.cross_entropy_rows(
            logits, labels.contiguous(), int(ignore_index))
        if reduction == "mean":
            return loss.sum() / (labels != ignore_index).sum().to(
                torch.float32)
        return loss.sum() if reduction == "sum" else loss
    return _CrossEntropy.apply(logits, labels.contiguous(), int(ignore_index),
                               reduction)


def _op(name, option, tensors, like, what):
    """kiln_c_op on {name: tensor} on like's device and torch's current
    stream there: from the C++ extension where it is built (_cpp; ctypes and
    the packing cost ~13 us a call, docs/experiments/2026-11-29-session58.txt),
    else through ctypes."""
    cpp = _cpp.module()
    if cpp is not None:
        cpp.op(name, option, list(tensors), list(tensors.values()),
               like.device.index, what)
    else:
        _lib.op(name, option, tensors, _stream(like), like.device.index, what)
