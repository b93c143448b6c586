"""kiln.linear: act(x @ weight_t + bias) with the bias and activation in the
GEMM's epilogue (kernels/gemm), forward and backward.

Eager calls launch from C++ where the extension is built (kiln._cpp:
aligned bf16 operands, K and N multiples of 8), with a gradient through a
C++ autograd Function of the same kernels and formulas; the rest, and
every traced call (torch.compile, meta tensors), go through two ops:
torch.ops.kiln.linear (no gradient) and torch.ops.kiln.linear_train, whose
backward is torch.ops.kiln.linear_backward: dZ from dY (GELU's from the
pre-activation Z the forward GEMM also wrote; ReLU's from Y), then
dX = dZ·Wᵀ and dW = Xᵀ·dZ as kiln GEMMs that read X, W and dZ as they are
stored (A or B given transposed: no transposing copies), db = Σ dZ.
A weight gradient whose few output tiles over a long K would leave SMs idle
takes split-K: each range of K stores its product apart (fp32), summed in
a fixed order (deterministic); kiln_c_linear_split_k decides.
"""
from typing import Optional

import torch

from . import _cpp, _lib
from .fused import _need_tensor, _op
from .ops import (_log_copy, _misaligned, _plain, _plain_or_none, _sm_count,
                  _under_autocast)

_ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2}


def _padded_cols(cols):
    """cols rounded up to a multiple of 8 elements (16 bytes of bf16): a row
    length the GEMM reads and writes by TMA."""
    return -(-cols // 8) * 8


def _padded_rows(name, t):
    """A GEMM operand as the kernel reads it fast: rows whose length is not
    a multiple of 8 elements (16 bytes), or a base off 16 bytes, would be
    read by the compute warps one element at a time (H200: a weight of N =
    50257 columns or a K of 4095 ran at half the speed of the copy first),
    so such a t is copied into rows padded to a multiple of 8 and the view
    of its columns passed (the padding is never read: the kernel's bounds
    stop at the columns). KILN_LOG=launch says so once per argument and
    reason. Rows already so (a padded result of kiln.linear's) pass as
    they are."""
    if t.numel() == 0 or (t.stride(-1) == 1 and not _misaligned(t)):
        return t
    t = t.contiguous()
    why = _misaligned(t)
    if not why:
        return t
    _log_copy("kiln.linear", name, why)
    rows, cols = t.shape
    padded = torch.empty(rows, _padded_cols(cols), dtype=t.dtype,
                         device=t.device)[:, :cols]
    return padded.copy_(t)


def _result(rows, cols, like):
    """A GEMM's bf16 result: rows padded to a multiple of 8 elements, the
    (rows, cols) view returned (its rows then go out by TMA)."""
    padded = _padded_cols(cols)
    if padded != cols:
        _log_copy("kiln.linear", "the result", f"{cols} columns of 2 bytes",
                  f"written into rows of {padded}, returned as their view")
    return torch.empty(rows, padded, device=like.device,
                       dtype=torch.bfloat16)[:, :cols]


def _split_k(M, N, K, device):
    """The K ranges kiln splits an (M x K)·(K x N) GEMM without epilogue
    into on `device` (kiln_c_linear_split_k; 1 off CUDA)."""
    if device.type != "cuda":
        return 1
    return _lib.linear_split_k(M, N, K, _sm_count(device))


def _gemm(a, b, activation=0, bias=None, z=None):
    """act(a @ b + bias) by kiln's GEMM, a (M, K) and b (K, N) read as they
    are stored where that is a transpose of a contiguous matrix (AT, BT),
    else copied to contiguous padded rows; z, when given, receives a @ b +
    bias."""
    def operand(name, t):
        # Column-major (the transpose of row-major storage): given as its
        # transpose, AT or BT.
        if t.stride(1) != 1 and t.stride(0) == 1:
            return name + "T", _padded_rows(name + "T", t.t())
        return name, _padded_rows(name, t)
    out = _result(a.shape[0], b.shape[1], a)
    if out.numel() == 0:
        return out
    if a.shape[1] == 0:  # a weight gradient of no rows: zeros
        assert bias is None and z is None and activation == 0
        return out.zero_()
    a_name, a_given = operand("A", a)
    b_name, b_given = operand("B", b)
    if bias is None and z is None and activation == 0 and a_name == "AT":
        # A weight gradient (A read as AT): where its few output tiles over
        # a long K leave SMs idle, split-K's partial products, summed here
        # in a fixed order (deterministic), as csrc/linear.cpp does.
        split = _split_k(out.shape[0], out.shape[1], a.shape[1], a.device)
        if split > 1:
            partials = torch.empty(split, *out.shape, dtype=torch.float32,
                                   device=a.device)
            _op("linear", 0, {a_name: a_given, b_name: b_given,
                              "C": partials}, a, "kiln.linear")
            return out.copy_(partials.sum(0))
    tensors = {a_name: a_given, b_name: b_given, "C": out}
    if bias is not None:
        tensors["Bias"] = bias.contiguous()
    if z is not None:
        tensors["Z"] = z
    _op("linear", activation, tensors, a, "kiln.linear")
    return out


def linear(x, weight_t, bias=None, activation="none"):
    """act(x @ weight_t + bias) in one kernel (the bias and activation in
    the GEMM's epilogue): x (..., K) (as torch.nn.functional.linear's
    input: its leading dimensions are the GEMM's M rows), weight_t (K, N),
    bias (N,), bf16, the result (..., N) bf16; activation "none", "relu"
    or "gelu" (tanh form, as torch's approximate='tanh'). Differentiable
    in x, weight_t and bias.
    weight_t may be the transpose of an nn.Linear's (N, K) weight
    (`layer.weight.t()`): that is read as it is stored (the kernel takes it
    N x K), not copied. Where N is not a multiple of 8 (rows of 16-byte
    multiples) the result is the (M, N) view of rows padded to the next
    multiple of 8 (stride(0) that length), as a padded vocabulary's
    logits[:, :N] would be: its rows then go out by TMA, not an element at
    a time (H200, 8192x50257x768: 1.39 ms against 2.58; see
    docs/python.md). Under torch.compile (or on meta tensors) it is the op
    torch.ops.kiln.linear (or kiln.linear_train when a gradient is needed),
    with fake implementations for tracing. Under bf16 autocast, float32 x,
    weight_t and bias are cast to bf16 first, as autocast casts F.linear's."""
    x, weight_t, bias = _under_autocast(x, weight_t, bias)
    traced = (torch.compiler.is_compiling() or
              torch._C._are_functorch_transforms_active())
    grad = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad
        for t in (x, weight_t, bias))
    # The common case (aligned bf16 operands, N a multiple of 8, a weight
    # (K, N) or nn.Linear's (N, K) transposed) decided and launched in C++:
    # 15-20 us of host time a call fewer (docs/python.md); with a gradient
    # a C++ autograd Function (csrc/linear.cpp).
    if (not traced and _plain(x) and _plain(weight_t) and
            _plain_or_none(bias) and x.is_cuda and
            isinstance(activation, str) and activation in _ACTIVATIONS and
            (cpp := _cpp.module()) is not None):
        y = (cpp.linear_train if grad else cpp.linear)(
            x, weight_t, bias, _ACTIVATIONS[activation])
        if y is not None:
            return y
    on = ("cuda", "meta")
    _need_tensor("linear", "x", x, (torch.bfloat16,), types=on)
    _need_tensor("linear", "weight_t", weight_t, (torch.bfloat16,), x.device,
                 on)
    if bias is not None:
        _need_tensor("linear", "bias", bias, (torch.bfloat16,), x.device, on)
    if activation not in _ACTIVATIONS:
        raise ValueError(f"kiln.linear: activation must be 'none', 'relu' or "
                         f"'gelu', got {activation!r}")
    if (x.dim() < 1 or weight_t.dim() != 2 or
            x.shape[-1] != weight_t.shape[0]):
        raise ValueError(f"kiln.linear: x (..., K) and weight_t (K, N) do "
                         f"not match: {tuple(x.shape)}, "
                         f"{tuple(weight_t.shape)}")
    N = weight_t.shape[1]
    if bias is not None and tuple(bias.shape) != (N,):
        raise ValueError(f"kiln.linear: bias must have shape ({N},), got "
                         f"{tuple(bias.shape)}")
    if x.shape[-1] == 0:
        raise ValueError("kiln.linear: K = 0 (x has no columns)")
    traced = traced or x.device.type == "meta" or not _plain(x)
    # The leading dimensions are the GEMM's rows.
    rows = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
    y = _linear_rows(rows, weight_t, bias, _ACTIVATIONS[activation], grad,
                     traced)
    return y if x.dim() == 2 else y.view(*x.shape[:-1], N)


def _linear_rows(x, weight_t, bias, act, grad, traced):
    """kiln.linear of checked 2-D x, through the op or Function that the
    call needs."""
    if grad and traced:
        return torch.ops.kiln.linear_train(x, weight_t, bias, act)[0]
    if grad:  # a custom op's dispatch cost ~0.4 ms of host time a step
        return _EagerLinear.apply(x, weight_t, bias, act)
    if traced:
        return torch.ops.kiln.linear(x, weight_t, bias, act)
    return _gemm(x, weight_t, act, bias)


def _train_body(x, weight_t, bias, activation):
    """(Y, Z): Z the pre-activation under GELU (its gradient needs it),
    else an empty tensor."""
    gelu = activation == _ACTIVATIONS["gelu"]
    z = _result(x.shape[0], weight_t.shape[1], x) if gelu else x.new_empty(0)
    return _gemm(x, weight_t, activation, bias, z if gelu else None), z


def _backward_body(grad_y, x, weight_t, y, z, activation, has_bias, needs):
    """(dX, dW, db) of Y = act(X·W + b), W = weight_t, each an empty tensor
    where `needs` says it is not needed."""
    if activation == _ACTIVATIONS["gelu"]:
        dz = torch.ops.aten.gelu_backward(grad_y, z, approximate="tanh")
    elif activation == _ACTIVATIONS["relu"]:
        dz = torch.ops.aten.threshold_backward(grad_y, y, 0)
    else:
        dz = grad_y
    # (A custom op's outputs may not alias each other: one empty each.)
    dx = _gemm(dz, weight_t.t()) if needs[0] else x.new_empty(0)
    dw = x.new_empty(0)
    if needs[1]:
        # As W is stored: nn.Linear's (N, K) as dZᵀ·X, a (K, N) as Xᵀ·dZ.
        if not weight_t.is_contiguous() and weight_t.t().is_contiguous():
            dw = _gemm(dz.t(), x).t()
        else:
            dw = _gemm(x.t(), dz)
    db = dz.sum(0, dtype=torch.float32).to(grad_y.dtype) \
        if needs[2] and has_bias else x.new_empty(0)
    return dx, dw, db


class _EagerLinear(torch.autograd.Function):
    """kiln.linear with a gradient, eager: the bodies of linear_train and
    linear_backward without the custom ops' dispatch."""

    @staticmethod
    def forward(ctx, x, weight_t, bias, activation):
        y, z = _train_body(x, weight_t, bias, activation)
        _setup_context(ctx, (x, weight_t, bias, activation), (y, z))
        return y

    @staticmethod
    def backward(ctx, grad_y):
        return _grads(ctx, grad_y)


def _fake_result(rows, cols, like):
    return like.new_empty_strided((rows, cols), (_padded_cols(cols), 1))


@torch.library.custom_op("kiln::linear", mutates_args=(), device_types="cuda")
def _linear_op(x: torch.Tensor, weight_t: torch.Tensor,
               bias: Optional[torch.Tensor], activation: int) -> torch.Tensor:
    return _gemm(x, weight_t, activation, bias)


@_linear_op.register_fake
def _(x, weight_t, bias, activation):
    return _fake_result(x.shape[0], weight_t.shape[1], x)


@torch.library.custom_op("kiln::linear_train", mutates_args=(),
                         device_types="cuda")
def _linear_train(x: torch.Tensor, weight_t: torch.Tensor,
                  bias: Optional[torch.Tensor],
                  activation: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _train_body(x, weight_t, bias, activation)


@_linear_train.register_fake
def _(x, weight_t, bias, activation):
    y = _fake_result(x.shape[0], weight_t.shape[1], x)
    if activation == _ACTIVATIONS["gelu"]:
        return y, _fake_result(x.shape[0], weight_t.shape[1], x)
    return y, x.new_empty(0)


@torch.library.custom_op("kiln::linear_backward", mutates_args=(),
                         device_types="cuda")
def _linear_backward(grad_y: torch.Tensor, x: torch.Tensor,
                     weight_t: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                     activation: int, has_bias: bool,
                     needs: list[bool]) -> tuple[torch.Tensor, torch.Tensor,
                                                  torch.Tensor]:
    return _backward_body(grad_y, x, weight_t, y, z, activation, has_bias,
                          needs)


@_linear_backward.register_fake
def _(grad_y, x, weight_t, y, z, activation, has_bias, needs):
    M, K = x.shape
    N = weight_t.shape[1]
    dx = _fake_result(M, K, x) if needs[0] else x.new_empty(0)
    dw = x.new_empty(0)
    if needs[1]:
        transposed = not weight_t.is_contiguous() and \
            weight_t.t().is_contiguous()
        dw = _fake_result(N, K, x).t() if transposed else _fake_result(K, N, x)
    db = x.new_empty(N) if needs[2] and has_bias else x.new_empty(0)
    return dx, dw, db


def _setup_context(ctx, inputs, output):
    x, weight_t, bias, activation = inputs
    y, z = output
    ctx.activation, ctx.has_bias = activation, bias is not None
    ctx.save_for_backward(x, weight_t, y if activation == 1 else None, z)


def _grads(ctx, grad_y, backward=_backward_body):
    """The four inputs' gradients (None where none is needed) of a forward
    that saved (x, weight_t, y or None, z)."""
    x, weight_t, y, z = ctx.saved_tensors
    needs = list(ctx.needs_input_grad[:3])
    grads = backward(grad_y, x, weight_t,
                     y if y is not None else x.new_empty(0), z,
                     ctx.activation, ctx.has_bias, needs)
    dx, dw, db = (g if need else None for g, need in zip(grads, needs))
    return dx, dw, db if ctx.has_bias else None, None


def _backward(ctx, grad_y, grad_z):
    return _grads(ctx, grad_y, torch.ops.kiln.linear_backward)


_linear_train.register_autograd(_backward, setup_context=_setup_context)
