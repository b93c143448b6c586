"""kiln.attention: flash attention as a PyTorch custom op with autograd.

Two ops are registered with torch.library, each with a fake (meta)
implementation, so that torch.compile traces them without a graph break and
CUDA graphs capture their launches:

  kiln::attention_forward(q, k, v, causal, scale, bshd) -> (o, lse)
  kiln::attention_backward(grad_o, q, k, v, o, lse, causal, scale, bshd)
      -> (dq, dk, dv)

Both launch on torch.cuda.current_stream(q.device) and allocate what they
write (outputs, the backward's fp32 workspace) through torch's allocator.
"""
import math
import os
import sys

import torch

from . import _cpp, _key_lengths, _lib

_LAYOUTS = {"bhsd": "(batch, heads, seq, head_dim)",
            "bshd": "(batch, seq, heads, head_dim)"}
_DTYPES = (torch.bfloat16, torch.float16)


def _dims(t, bshd):
    """(B, H, N, D) of a 4-D tensor in the given layout."""
    b, x, y, d = t.shape
    return (b, y, x, d) if bshd else (b, x, y, d)


def _need_bool(op, name, value):
    """TypeError naming `op` and `name` unless value is a bool ("yes" or 1
    would pass as true)."""
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be a bool, got "
                        f"{type(value).__name__}")


def _check(q, k, v, causal, scale, layout, op="kiln.attention"):
    """Raises TypeError/ValueError naming the argument (and `op`, the
    user's call); launches nothing."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, "
                            f"got {type(t).__name__}")
    if not isinstance(layout, str) or layout not in _LAYOUTS:
        raise ValueError(f"{op}: layout must be 'bhsd' or 'bshd', "
                         f"got {layout!r}")
    _need_bool(op, "causal", causal)
    if scale is not None and (isinstance(scale, bool) or
                              not isinstance(scale, (int, float)) or
                              not math.isfinite(scale) or scale <= 0):
        raise ValueError(f"{op}: scale must be a positive finite "
                         f"number or None, got {scale!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype not in _DTYPES:
            raise TypeError(f"{op}: {name} has dtype {t.dtype}; kiln "
                            f"takes torch.bfloat16 or torch.float16")
        if t.dim() != 4:
            raise ValueError(f"{op}: {name} must be 4-D "
                             f"{_LAYOUTS[layout]}, got shape {tuple(t.shape)}")
        if t.device.type not in ("cuda", "meta"):
            raise ValueError(f"{op}: {name} is on {t.device}; kiln "
                             f"runs on CUDA tensors")
        if t.stride(-1) != 1:
            raise ValueError(f"{op}: {name}'s last dimension must be "
                             f"contiguous (stride 1), got strides "
                             f"{tuple(t.stride())}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"{op}: q, k and v must share one dtype, got "
                        f"{q.dtype}, {k.dtype}, {v.dtype}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"{op}: q, k and v must be on one device, "
                         f"got {q.device}, {k.device}, {v.device}")
    bshd = layout == "bshd"
    (B, H, Nq, D), (Bk, Hk, Nk, Dk) = _dims(q, bshd), _dims(k, bshd)
    if (Bk, Dk) != (B, D):
        raise ValueError(f"{op}: k {tuple(k.shape)} must match q "
                         f"{tuple(q.shape)} in batch and head_dim "
                         f"(layout {layout!r})")
    if Hk < 1 or H % Hk:
        raise ValueError(f"{op}: k's {Hk} heads must divide q's {H} "
                         f"(grouped-query attention: each k/v head serves "
                         f"H / Hk query heads; layout {layout!r}, q "
                         f"{tuple(q.shape)}, k {tuple(k.shape)})")
    if _dims(v, bshd) != (Bk, Hk, Nk, Dk):
        raise ValueError(f"{op}: v {tuple(v.shape)} must have k's "
                         f"shape {tuple(k.shape)}")
    if D not in (64, 128):
        raise ValueError(f"{op}: head_dim {D} is not supported "
                         f"(64 or 128)")
    if min(B, H, Nq, Nk) < 1:
        raise ValueError(f"{op}: empty tensors (q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)})")


_raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)

# What the C++ paths take as they are: tensors, and nn.Parameters (a layer's
# weight and bias); other subclasses (FakeTensor, DTensor, ...) keep their
# own dispatch through the Python path.
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _plain(t):
    return type(t) in _PLAIN


def _plain_or_none(t):
    return t is None or type(t) in _PLAIN


def _autocast_bf16():
    """torch.autocast("cuda", dtype=torch.bfloat16) is on."""
    return (torch.is_autocast_enabled("cuda") and
            torch.get_autocast_dtype("cuda") == torch.bfloat16)


def _under_autocast(*ts):
    """Under bf16 autocast, the float32 / float16 tensors among `ts` cast to
    bf16 (differentiably: a float32 parameter gets a float32 gradient), as
    autocast casts a matmul's inputs: fp32 master weights and an fp32
    residual stream reach the bf16 kernels. A float32 parameter (or its 2-D
    transpose) is cast once per autocast region, through torch's autocast
    cache, where the C++ extension is built. Otherwise `ts` as given (the
    checks then name any other dtype)."""
    if not _autocast_bf16():
        return ts
    # From C++ through autocast's cache (csrc/ops.cpp): a float32 parameter
    # is cast once per autocast region, as torch's ops cast it.
    if (not _traced() and all(t is None or _plain(t) for t in ts) and
            (cpp := _cpp.module()) is not None):
        return tuple(cpp.autocast_bf16(list(ts)))
    return tuple(t.to(torch.bfloat16) if isinstance(t, torch.Tensor) and
                 t.dtype in (torch.float32, torch.float16) else t for t in ts)


def _traced():
    """A trace (torch.compile, functorch) is running: the library ops go
    through their torch.library ops, whose fake implementations it sees."""
    return (torch.compiler.is_compiling() or
            torch._C._are_functorch_transforms_active())


_sm_counts = {}


def _sm_count(device):
    """The SMs of CUDA device `device` (a torch.device), kept per index."""
    sms = _sm_counts.get(device.index)
    if sms is None:
        sms = _sm_counts[device.index] = torch.cuda.get_device_properties(
            device).multi_processor_count
    return sms


def _raw_stream(index):
    """The raw handle of torch's current stream on device `index`."""
    if _raw is not None:
        return _raw(index)
    return torch.cuda.current_stream(index).cuda_stream


def _stream(t):
    """The raw handle of torch's current stream on t's device."""
    return _raw_stream(t.device.index)


def _misaligned(t):
    """Why the kernels would take t's slow path (its base or a stride not a
    multiple of 16 bytes, as the runtime's tensorAligned decides), or ''."""
    size = t.element_size()
    strides = [s for s in t.stride()[:-1] if (s * size) % 16]
    if strides:
        return f"strides {tuple(t.stride())} (elements of {size} bytes)"
    base = t.data_ptr() % 16
    return f"a base address {base} bytes past 16" if base else ""


_logged_copies = set()


def _log_copy(op, name, why, what="copied to aligned memory first",
              problem="is not 16-byte aligned"):
    """KILN_LOG=launch: one line per op, argument and reason that a copy (or
    another way round a misaligned tensor, `what`) was made for. Not while
    torch.compile traces (a print would break its graph): the copy is an op
    of the graph it prints."""
    if torch.compiler.is_compiling():
        return
    if "launch" in os.environ.get("KILN_LOG", "").split(",") and \
            (op, name, why) not in _logged_copies:
        _logged_copies.add((op, name, why))
        print(f"{op}: {name} {problem} ({why}): {what}", file=sys.stderr)


def _contiguous(op, name, t, layout="contiguous"):
    """t as a kernel takes it: copied (KILN_LOG=launch says so once per op,
    argument and strides) where it is not laid out as `layout` says."""
    _log_copy(op, name, f"strides {tuple(t.stride())}",
              f"copied to {layout} memory first", f"is not {layout}")
    return t.contiguous()


def _aligned_copy(name, t):
    """K or V as the kernels read them fast: where t is not 16-byte aligned
    its rows would be copied by the compute warps themselves, which spill
    (H200, B=4 N=4096: 2.3-8x slower than aligned), so t is copied to fresh
    memory first (0.89-0.97 of aligned, the copy included; a differentiable
    clone). KILN_LOG=launch says so once per argument and reason. Q keeps
    its own loads (0.93-0.99 of aligned, a copy no faster)."""
    why = _misaligned(t)
    if not why:
        return t
    _log_copy("kiln.attention", name, why)
    return t.clone(memory_format=torch.contiguous_format)


def _eager(q, k, v):
    """Plain CUDA tensors, no torch.compile tracing, no functorch transform:
    a call that may skip the dispatcher (which costs ~45 us a call, and the
    custom op's autograd another ~100)."""
    return (type(q) is torch.Tensor and type(k) is torch.Tensor and
            type(v) is torch.Tensor and q.is_cuda and
            not torch.compiler.is_compiling() and
            not torch._C._are_functorch_transforms_active())


def _needs_grad(q, k, v):
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or
                                        v.requires_grad)


def _dispatch_free(q, k, v):
    """Whether a call may run the op's body directly: eager, and no gradient
    to record."""
    return _eager(q, k, v) and not _needs_grad(q, k, v)


@torch.library.custom_op("kiln::attention_forward", mutates_args=(),
                         device_types="cuda")
def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
             scale: float, bshd: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward_body(q, k, v, causal, scale, bshd)


def _forward_body(q, k, v, causal, scale, bshd, checked=False,
                  key_lengths=None):
    """checked: q, k and v went through _check (the launch then skips its
    per-pointer driver queries). key_lengths: each batch's keys, or None."""
    B, H, Nq, _ = _dims(q, bshd)
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = q.new_empty((B, H, Nq), dtype=torch.float32)
    # Few row blocks (decoding, short queries on long keys): the keys split
    # in ranges, whose partial O and LSE take a workspace.
    n = _lib.forward_workspace(q, k, causal, scale, bshd,
                               key_lengths is not None)
    ws = torch.empty(n, dtype=torch.float32, device=q.device) if n else None
    _lib.forward(q, k, v, o, lse, ws, causal, scale, bshd, _stream(q), checked,
                 key_lengths)
    return o, lse


@_forward.register_fake
def _(q, k, v, causal, scale, bshd):
    B, H, Nq, _ = _dims(q, bshd)
    return q.new_empty(q.shape), q.new_empty((B, H, Nq), dtype=torch.float32)


@torch.library.custom_op("kiln::attention_backward", mutates_args=(),
                         device_types="cuda")
def _backward(grad_o: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
              v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, causal: bool,
              scale: float, bshd: bool
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward_body(grad_o, q, k, v, o, lse, causal, scale, bshd)


def _backward_body(grad_o, q, k, v, o, lse, causal, scale, bshd,
                   checked=False):
    B, H, Nq, D = _dims(q, bshd)
    if grad_o.stride(-1) != 1:  # autograd may hand an expanded gradient
        grad_o = grad_o.contiguous()
    # empty_like: a third of torch.empty's host time with its keywords.
    dq, dk, dv = (torch.empty_like(t, memory_format=torch.contiguous_format)
                  for t in (q, k, v))
    ws = torch.empty(_lib.workspace_elements(B, H, Nq, D), dtype=torch.float32,
                     device=q.device)
    _lib.backward(q, k, v, o, grad_o, lse, ws, dq, dk, dv, causal, scale, bshd,
                  _stream(q), checked)
    return dq, dk, dv


@_backward.register_fake
def _(grad_o, q, k, v, o, lse, causal, scale, bshd):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, bshd = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.scale, ctx.bshd = causal, scale, bshd
    # Gradients flow through O only; LSE is returned for inspection or a
    # caller's own backward, and autograd refuses to differentiate it.
    ctx.mark_non_differentiable(lse)


def _autograd_backward(ctx, grad_o, grad_lse):
    if grad_o is None:  # not materialized: O took no part in the loss
        return None, None, None, None, None, None
    q, k, v, o, lse = ctx.saved_tensors
    # Eager autograd (no double backward: the op has none) runs the body
    # directly; traced by torch.compile it stays an op in the graph.
    if type(grad_o) is torch.Tensor and _dispatch_free(q, k, v):
        # Checked at the forward when it came through kiln.attention.
        dq, dk, dv = _backward_body(grad_o, q, k, v, o, lse, ctx.causal,
                                    ctx.scale, ctx.bshd,
                                    getattr(ctx, "checked", False))
    else:
        dq, dk, dv = torch.ops.kiln.attention_backward(
            grad_o, q, k, v, o, lse, ctx.causal, ctx.scale, ctx.bshd)
    return dq, dk, dv, None, None, None


_forward.register_autograd(_autograd_backward, setup_context=_setup_context)


class _EagerAttention(torch.autograd.Function):
    """Eager autograd without the dispatcher: the op's body forward, the
    backward op's body backward (the same kernels, the same bits as through
    the ops, which torch.compile sees)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, bshd):  # from attention()
        o, lse = _forward_body(q, k, v, causal, scale, bshd, True)
        _setup_context(ctx, (q, k, v, causal, scale, bshd), (o, lse))
        ctx.checked = True
        # No zeros made for LSE's gradient, which is never used (an
        # allocation and a fill kernel on every backward).
        ctx.set_materialize_grads(False)
        return o, lse

    @staticmethod
    def backward(ctx, grad_o, grad_lse):
        return _autograd_backward(ctx, grad_o, grad_lse)


def _cpp_path_may_take(q, k, v, scale, layout):
    """Whether the C++ entries may check and launch the call (they answer
    None where they do not take it): plain CUDA tensors, eager."""
    return (type(q) is torch.Tensor and type(k) is torch.Tensor and
            type(v) is torch.Tensor and
            (scale is None or type(scale) is float) and
            (layout == "bhsd" or layout == "bshd") and q.is_cuda and
            not torch.compiler.is_compiling() and
            not torch._C._are_functorch_transforms_active())


def attention(q, k, v, *, causal=False, scale=None, layout="bhsd",
              return_lse=False, key_lengths=None):
    """Scaled dot-product attention, softmax(scale · q kᵀ) v, by kiln.

    q: (B, H, Nq, D), k and v: (B, Hk, Nk, D) with layout="bhsd" (SDPA's), or
    (B, N, H, D) with layout="bshd" (flash_attn_func's). Hk is H, or a
    divisor of it for grouped-query (and multi-query, Hk = 1) attention:
    query head h reads k/v head h // (H // Hk), as SDPA's enable_gqa=True
    and flash_attn_func take them; dk and dv come back summed over each
    k/v head's query heads, in k's and v's shapes. bfloat16 or float16
    CUDA tensors on one device, D 64 or 128, any Nq and Nk, last dimension
    contiguous (k or v whose base or strides are not multiples of 16 bytes
    are copied to aligned memory first: their own loads run several times
    slower; KILN_LOG=launch says so). causal: query i attends to keys
    j <= i (SDPA's is_causal, aligned at the top left when Nq != Nk).
    scale: None for 1/sqrt(D).
    Returns O in q's layout, and with return_lse=True also the fp32
    (B, H, Nq) natural-log logsumexp of each row of scaled scores (not
    differentiable). Gradients of q, k and v through autograd; bit for bit the
    same on every run under torch.use_deterministic_algorithms(True) (dQ
    then takes a kernel of its own instead of atomics).
    key_lengths: None, or an int32 (B,) CUDA tensor: batch b attends to its
    first L = key_lengths[b] keys of k and v (new queries reading a KV cache
    whose sequences hold different numbers of tokens, each padded to Nk; the
    slots past a length are never read, whatever they hold). causal=True
    then takes the queries as the last Nq of the L positions (query i sees
    keys j <= L - Nq + i, aligned at the bottom right: a chunk of new tokens
    whose keys are in the cache). Lengths outside [0, Nk] are clamped; a row
    of no keys gets O 0 and LSE -inf. Forward only (no gradients: under
    torch.no_grad()).
    """
    _need_bool("kiln.attention", "return_lse", return_lse)  # "yes": a tuple
    if key_lengths is not None:
        return _key_lengths.attention(q, k, v, key_lengths, causal, scale,
                                      layout, return_lse)
    # The common case checked and launched in C++ (csrc/attention_autograd.
    # cpp, attentionChecked): the checks below cost ~8 us of a decode call.
    if (type(causal) is bool and _cpp_path_may_take(q, k, v, scale, layout)
            and (cpp := _cpp.module()) is not None):
        r = cpp.attention_checked(q, k, v, causal, scale, layout == "bshd")
        if r is not None:
            return tuple(r) if return_lse else r[0]
    _check(q, k, v, causal, scale, layout)
    D = q.shape[-1]
    s = float(scale) if scale is not None else 1.0 / math.sqrt(D)
    bshd = layout == "bshd"
    # Eager calls only: traces (torch.compile, functorch) stay as they were
    # (one GPU run of test_torch_compile_matches_eager failed with the copy
    # traced; not reproduced without a GPU).
    eager = _eager(q, k, v)
    if eager:
        k, v = _aligned_copy("k", k), _aligned_copy("v", v)
    if not eager:
        o, lse = torch.ops.kiln.attention_forward(q, k, v, causal, s, bshd)
    elif (cpp := _cpp.module()) is not None:  # the same launches, from C++
        o, lse = cpp.attention(q, k, v, causal, s, bshd)
    elif _needs_grad(q, k, v):
        o, lse = _EagerAttention.apply(q, k, v, causal, s, bshd)
    else:
        o, lse = _forward_body(q, k, v, causal, s, bshd, True)
    return (o, lse) if return_lse else o
