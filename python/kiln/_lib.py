"""ctypes binding of libkiln_c (python/capi/kiln_c.h), loaded on first use.

Why ctypes and a C ABI rather than a compiled extension: libkiln_c is built
with the rest of kiln by CMake and links no Python or torch, so one build
serves every Python and torch version (3.11 here, 3.12 + torch 2.11 on the GPU
machines); torch only ever passes pointers, sizes, strides and a stream
handle across, which ctypes does in a few microseconds. The one part built
against torch, the eager autograd in C++ (_cpp.py), calls this library
through the function addresses ctypes gives it, and is built on the machine
for the torch installed there.

The library is looked for at $KILN_LIBRARY, next to this package (lib/), in
the source tree's build folder (build/python/, or $KILN_BUILD_DIR/python/),
then by name on the loader's path.
"""
import ctypes
import os
import struct
import threading

_BAD_INPUT, _FAILED = 1, 2
_BF16, _F16 = 0, 1


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("sizes", ctypes.c_int64 * 4),
                ("strides", ctypes.c_int64 * 4)]


class _Options(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("causal", ctypes.c_int),
                ("scale", ctypes.c_double), ("stream", ctypes.c_void_p),
                ("device", ctypes.c_int), ("deterministic", ctypes.c_int),
                ("pointers_checked", ctypes.c_int)]


class _RowNormDtypes(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("w", ctypes.c_int), ("y", ctypes.c_int)]


_lock = threading.Lock()
_lib = None


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    build = os.environ.get("KILN_BUILD_DIR", os.path.join(root, "build"))
    if not os.path.isabs(build):
        build = os.path.join(root, build)
    env = os.environ.get("KILN_LIBRARY")
    if env:
        return [env]
    return [os.path.join(here, "lib", "libkiln_c.so"),
            os.path.join(build, "python", "libkiln_c.so"), "libkiln_c.so"]


def library():
    """The loaded libkiln_c; raises RuntimeError saying where it looked."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append(f"{path} (missing)")
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path} ({e})")
                continue
            _declare(lib)
            _lib = lib
            return lib
        raise RuntimeError("kiln: cannot load libkiln_c.so (build kiln first: "
                           "scripts/build.sh; or set KILN_LIBRARY); tried: " +
                           "; ".join(tried))


def _declare(lib):
    P = ctypes.POINTER
    err = [ctypes.c_char_p, ctypes.c_size_t]
    # Tensors go as addresses into one packed buffer (_packed).
    T = ctypes.c_void_p
    lib.kiln_c_attention_forward_workspace.argtypes = (
        [P(_Options), T, T, P(ctypes.c_int64)] + err)
    lib.kiln_c_attention_forward_workspace.restype = ctypes.c_int
    lib.kiln_c_attention_forward_key_lengths_workspace.argtypes = (
        [P(_Options), T, T, P(ctypes.c_int64)] + err)
    lib.kiln_c_attention_forward_key_lengths_workspace.restype = ctypes.c_int
    lib.kiln_c_attention_forward.argtypes = ([P(_Options)] + [T] * 5 +
                                             [ctypes.c_void_p] + err)
    lib.kiln_c_attention_forward.restype = ctypes.c_int
    lib.kiln_c_attention_forward_key_lengths.argtypes = (
        [P(_Options)] + [T] * 6 + [ctypes.c_void_p] + err)
    lib.kiln_c_attention_forward_key_lengths.restype = ctypes.c_int
    lib.kiln_c_attention_backward.argtypes = ([P(_Options)] + [T] * 6 +
                                              [ctypes.c_void_p] + [T] * 3 + err)
    lib.kiln_c_attention_backward.restype = ctypes.c_int
    lib.kiln_c_attention_backward_workspace.argtypes = [ctypes.c_int64] * 4
    lib.kiln_c_attention_backward_workspace.restype = ctypes.c_int64
    lib.kiln_c_row_norm.argtypes = ([ctypes.c_int, P(_RowNormDtypes)] +
                                    [T] * 4 +
                                    [ctypes.c_double, ctypes.c_void_p,
                                     ctypes.c_int] + err)
    lib.kiln_c_row_norm.restype = ctypes.c_int
    lib.kiln_c_row_norm_backward.argtypes = ([ctypes.c_int,
                                              P(_RowNormDtypes)] + [T] * 6 +
                                             [ctypes.c_double, ctypes.c_void_p,
                                              ctypes.c_int] + err)
    lib.kiln_c_row_norm_backward.restype = ctypes.c_int
    lib.kiln_c_row_norm_backward_programs.argtypes = [ctypes.c_int64] * 2
    lib.kiln_c_row_norm_backward_programs.restype = ctypes.c_int64
    lib.kiln_c_linear_split_k.argtypes = [ctypes.c_int64] * 4
    lib.kiln_c_linear_split_k.restype = ctypes.c_int64
    lib.kiln_c_op.argtypes = ([ctypes.c_char_p, ctypes.c_int64,
                               ctypes.c_void_p, ctypes.c_int,
                               ctypes.c_void_p, ctypes.c_int] + err)
    lib.kiln_c_op.restype = ctypes.c_int
    lib.kiln_c_cache_stats.argtypes = [P(ctypes.c_int64), P(ctypes.c_int64)]
    lib.kiln_c_cache_stats.restype = None
    lib.kiln_c_version.restype = ctypes.c_char_p


_TENSOR = struct.Struct("<Q4q4q")  # kiln_c_tensor: data, sizes, strides
assert _TENSOR.size == ctypes.sizeof(_Tensor)


def _fields(t, bshd):
    """kiln_c_tensor's fields for `t` (1 to 4 dimensions, the unused ones
    0): a 4-D (B, N, H, D) tensor seen as (B, H, N, D) where bshd."""
    s, st = t.shape, t.stride()
    if bshd and len(s) == 4:
        return (t.data_ptr(), s[0], s[2], s[1], s[3], st[0], st[2], st[1], st[3])
    pad = (0,) * (4 - len(s))
    return (t.data_ptr(), *s, *pad, *st, *pad)


def _packed(tensors):
    """The kiln_c_tensor of each (tensor, bshd) pair in one buffer (one
    allocation a call rather than one ctypes object per tensor), and each
    one's address in it. Keep the buffer alive across the call."""
    fields = []
    for t, bshd in tensors:
        fields.extend(_fields(t, bshd))
    buf = ctypes.create_string_buffer(
        struct.pack("<" + "Q4q4q" * len(tensors), *fields))
    base = ctypes.addressof(buf)
    return buf, [base + i * _TENSOR.size for i in range(len(tensors))]


def _options(q, causal, scale, stream, checked):
    """checked: every tensor is known to be a CUDA tensor of q's device (the
    public entries check q, k and v and allocate the rest there), so the
    launch need not ask the driver about each pointer."""
    import torch
    # The backward's dQ without atomics when torch is asked for
    # deterministic algorithms (torch.use_deterministic_algorithms).
    return _Options(_F16 if q.dtype == _torch_f16() else _BF16, int(causal),
                    scale, stream, q.device.index,
                    int(torch.are_deterministic_algorithms_enabled()),
                    int(checked))


def _torch_f16():
    import torch
    return torch.float16


_errors = threading.local()


def _error_buffer():
    """A per-thread buffer for the C side's message."""
    buf = getattr(_errors, "buf", None)
    if buf is None:
        buf = _errors.buf = ctypes.create_string_buffer(4096)
    return buf


def _check(code, buf, what="kiln.attention"):
    if code == 0:
        return
    message = buf.value.decode(errors="replace")
    if code == _BAD_INPUT:
        raise ValueError(what + ": " + message)
    raise RuntimeError(what + ": " + message)


_forward_workspaces = {}


def forward_workspace(q, k, causal, scale, bshd, key_lengths=False):
    """Floats of fp32 workspace the forward (with key_lengths, given
    k_lengths) takes for q and k's problem (0: none; the keys split
    in ranges where few row blocks leave SMs idle), remembered per
    problem."""
    key = (q.shape, k.shape, q.dtype, q.device.index, causal, bshd,
           key_lengths)
    elements = _forward_workspaces.get(key)
    if elements is not None:
        return elements
    lib = library()
    buf = _error_buffer()
    keep, ptrs = _packed([(q, bshd), (k, bshd)])
    out = ctypes.c_int64()
    query = (lib.kiln_c_attention_forward_key_lengths_workspace if key_lengths
             else lib.kiln_c_attention_forward_workspace)
    code = query(
        ctypes.byref(_options(q, causal, scale, None, True)), *ptrs,
        ctypes.byref(out), buf, len(buf))
    del keep
    _check(code, buf)
    if len(_forward_workspaces) >= 4096:  # a server's many shapes
        _forward_workspaces.clear()
    _forward_workspaces[key] = out.value
    return out.value


def forward(q, k, v, o, lse, workspace, causal, scale, bshd, stream,
            checked=False, k_lengths=None):
    """workspace: forward_workspace's floats (with key_lengths where
    k_lengths is given), or None where 0. k_lengths: None, or int32 (B,):
    batch b attends to its first k_lengths[b] keys (causal, its queries the
    last Nq of them)."""
    lib = library()
    buf = _error_buffer()
    tensors = [(q, bshd), (k, bshd), (v, bshd), (o, bshd), (lse, False)]
    if k_lengths is not None:
        tensors.insert(3, (k_lengths, False))
    keep, ptrs = _packed(tensors)
    entry = (lib.kiln_c_attention_forward if k_lengths is None
             else lib.kiln_c_attention_forward_key_lengths)
    code = entry(
        ctypes.byref(_options(q, causal, scale, stream, checked)), *ptrs,
        None if workspace is None else workspace.data_ptr(), buf, len(buf))
    del keep
    _check(code, buf)


def workspace_elements(batch, heads, seq_q, head_dim):
    return library().kiln_c_attention_backward_workspace(batch, heads, seq_q,
                                                         head_dim)


def backward(q, k, v, o, do, lse, workspace, dq, dk, dv, causal, scale, bshd,
             stream, checked=False):
    lib = library()
    buf = _error_buffer()
    keep, p = _packed([(q, bshd), (k, bshd), (v, bshd), (o, bshd), (do, bshd),
                       (lse, False), (dq, bshd), (dk, bshd), (dv, bshd)])
    code = lib.kiln_c_attention_backward(
        ctypes.byref(_options(q, causal, scale, stream, checked)), *p[:6],
        workspace.data_ptr(), *p[6:], buf, len(buf))
    del keep
    _check(code, buf)


def _norm_dtypes(x, w, y):
    """kiln_c_row_norm_dtypes of x (and dx), w (and b), y (and dy)."""
    return _RowNormDtypes(_dtype_code(x), _dtype_code(w), _dtype_code(y))


def row_norm(kind, x, w, b, y, eps, stream, device):
    """kiln_c_row_norm: 0 RMSNorm, 1 LayerNorm (b ignored for 0). x and y
    are 2-D contiguous, w and b 1-D contiguous; each bf16 or float32 (b as
    w)."""
    lib = _lib or library()
    buf = _error_buffer()
    keep, p = _packed([(t, False) for t in (x, w, w if b is None else b, y)])
    code = lib.kiln_c_row_norm(kind, ctypes.byref(_norm_dtypes(x, w, y)), *p,
                               eps, stream, device, buf, len(buf))
    del keep
    _check(code, buf, "kiln.layer_norm" if kind else "kiln.rms_norm")


def row_norm_backward_programs(rows, sm_count):
    """kiln_c_row_norm_backward_programs: the partial rows of dW (and dB)
    the backward is tuned for."""
    return (_lib or library()).kiln_c_row_norm_backward_programs(rows,
                                                                 sm_count)


def linear_split_k(m, n, k, sm_count):
    """kiln_c_linear_split_k: the K ranges kiln splits an (M x K)·(K x N)
    GEMM without epilogue into (1: not split)."""
    return (_lib or library()).kiln_c_linear_split_k(m, n, k, sm_count)


def row_norm_backward(kind, x, w, dy, dx, dwp, dbp, eps, stream, device):
    """kiln_c_row_norm_backward: x, dy, dx 2-D contiguous (R, C), w 1-D
    contiguous, dwp and dbp (P, C) contiguous fp32 (dbp ignored for 0); dx
    as x, dy as the forward's y, each bf16 or float32."""
    lib = _lib or library()
    buf = _error_buffer()
    keep, p = _packed([(t, False) for t in
                       (x, w, dy, dx, dwp, dwp if dbp is None else dbp)])
    code = lib.kiln_c_row_norm_backward(
        kind, ctypes.byref(_norm_dtypes(x, w, dy)), *p, eps, stream, device,
        buf, len(buf))
    del keep
    _check(code, buf, "kiln.layer_norm" if kind else "kiln.rms_norm")


# kiln_c_named_tensor: name, dtype, rank (padding to 8), kiln_c_tensor.
_NAMED = struct.Struct("<Qii Q4q4q")
_DTYPES = None


def _dtype_code(t):
    global _DTYPES
    if _DTYPES is None:
        import torch
        _DTYPES = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2,
                   torch.int32: 3, torch.int64: 4}
    return _DTYPES[t.dtype]


_names = {}


def _name(n):
    """A NUL-terminated name that lives as long as the process."""
    b = _names.get(n)
    if b is None:
        b = _names[n] = ctypes.create_string_buffer(n.encode())
    return ctypes.addressof(b)


def op(name, option, tensors, stream, device, what):
    """kiln_c_op: the library kernel `name` on {argument name: tensor}."""
    lib = library()
    buf = _error_buffer()
    fields = []
    for n, t in tensors.items():
        s, st = list(t.shape), list(t.stride())
        fields.extend([_name(n), _dtype_code(t), len(s), t.data_ptr()] + s +
                      [0] * (4 - len(s)) + st + [0] * (4 - len(st)))
    keep = ctypes.create_string_buffer(
        struct.pack("<" + "Qii Q4q4q".replace(" ", "") * len(tensors), *fields))
    code = lib.kiln_c_op(name.encode(), option, ctypes.addressof(keep),
                         len(tensors), stream, device, buf, len(buf))
    del keep
    _check(code, buf, what)


def cache_stats():
    """(kernel variants loaded so far, compiles this process made)."""
    v, c = ctypes.c_int64(), ctypes.c_int64()
    library().kiln_c_cache_stats(ctypes.byref(v), ctypes.byref(c))
    return v.value, c.value


def version():
    return library().kiln_c_version().decode()
