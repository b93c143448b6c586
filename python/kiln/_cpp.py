"""kiln.attention's eager autograd in C++ (csrc/attention_autograd.cpp), and
kiln_c_op's launches without ctypes (csrc/ops.cpp; csrc/linear.cpp,
rotary.cpp, norms.cpp and cross_entropy.cpp: kiln.linear's, kiln.rotary's,
the row norms' and kiln.cross_entropy's common cases checked and run in one
call, with a gradient C++ Functions).

A Python autograd.Function's backward runs in autograd's device thread under
the GIL: at D=64 N=2048 that host time before the first kernel read 2.5% of
ten back-to-back backward calls (docs/experiments/2026-11-26-session31.txt,
section 5). The C++ Function calls the same C API (the same kernels, checks
and bits) with neither. It is built with torch.utils.cpp_extension against
the installed torch on first use (~40 s, once per torch version, in
$KILN_CACHE_DIR or ~/.cache/kiln), which needs a C++ compiler, ninja and
CUDA's headers; where it cannot be built, kiln says so once on stderr and
the Python Function runs. KILN_CPP_AUTOGRAD=0 keeps the Python Function.
"""
import ctypes
import hashlib
import os
import re
import sys
import threading

from . import _lib

_lock = threading.Lock()
_state = {}


def module():
    """The built extension, or None (the Python Function then runs)."""
    if "m" in _state:
        return _state["m"]
    with _lock:
        if "m" not in _state:
            _state["m"] = _build()
        return _state["m"]


def _build():
    switch = os.environ.get("KILN_CPP_AUTOGRAD", "1")
    if switch not in ("0", "1", ""):  # not a silent "on" for "false" or "no"
        raise ValueError(f"KILN_CPP_AUTOGRAD: {switch!r} is not 0 or 1")
    if switch == "0":
        return None
    import torch
    from torch.utils import cpp_extension
    here = os.path.dirname(os.path.abspath(__file__))
    # Named by torch's version, the C ABI it calls (kiln_c.h) and its own
    # sources: a build against an older header, or of older sources, is
    # never bound to a newer library.
    sources = [os.path.join(here, "csrc", f)
               for f in ("attention_autograd.cpp", "ops.cpp", "linear.cpp",
                         "rotary.cpp", "norms.cpp", "cross_entropy.cpp")]
    digest = hashlib.sha1()
    for path in [os.path.join(here, os.pardir, "capi", "kiln_c.h"),
                 os.path.join(here, "csrc", "ops.h")] + sources:
        with open(path, "rb") as f:
            digest.update(f.read())
    abi = digest.hexdigest()[:10]
    name = ("kiln_autograd_" + re.sub(r"[^A-Za-z0-9]", "_", torch.__version__)
            + "_" + abi)
    cache = os.environ.get("KILN_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "kiln")
    build = os.path.join(cache, "torch-extensions", name)
    cuda = cpp_extension.CUDA_HOME or "/usr/local/cuda"
    try:
        os.makedirs(build, exist_ok=True)
        if not os.path.exists(os.path.join(build, name + ".so")):
            print(f"kiln: building the C++ autograd path for torch "
                  f"{torch.__version__} (once, ~40 s) in {build}",
                  file=sys.stderr)
        m = cpp_extension.load(
            name=name,
            sources=sources,
            extra_include_paths=[os.path.join(here, os.pardir, "capi"),
                                 os.path.join(cuda, "include")],
            extra_cflags=["-O2"], extra_ldflags=["-lc10_cuda"],
            build_directory=build, verbose=False)
        lib = _lib.library()
        m.bind(*(ctypes.cast(f, ctypes.c_void_p).value for f in (
            lib.kiln_c_attention_forward,
            lib.kiln_c_attention_forward_key_lengths,
            lib.kiln_c_attention_forward_workspace,
            lib.kiln_c_attention_forward_key_lengths_workspace,
            lib.kiln_c_attention_backward,
            lib.kiln_c_attention_backward_workspace)))
        m.bind_op(*(ctypes.cast(f, ctypes.c_void_p).value
                    for f in (lib.kiln_c_op, lib.kiln_c_row_norm,
                              lib.kiln_c_row_norm_backward,
                              lib.kiln_c_row_norm_backward_programs,
                              lib.kiln_c_linear_split_k)))
        return m
    except Exception as e:  # no compiler, headers or ninja: say so, go on
        print(f"kiln: the C++ autograd path is unavailable ({type(e).__name__}:"
              f" {str(e).strip()[:300]}); kiln.attention's eager autograd "
              f"runs its backward from Python and the other ops launch "
              f"through ctypes (KILN_CPP_AUTOGRAD=0 skips the build)",
              file=sys.stderr)
        return None
