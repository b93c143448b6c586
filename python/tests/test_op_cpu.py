"""kiln.attention without a GPU: argument checks, the custom ops'
registration and fake implementations, torch.compile tracing them."""
import ctypes
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import kiln

META = "meta"


def qkv(B=2, H=3, Nq=100, Nk=None, D=64, dtype=torch.bfloat16, device=META,
        layout="bhsd", grad=False):
    Nk = Nq if Nk is None else Nk
    shape = (lambda n: (B, H, n, D)) if layout == "bhsd" else (lambda n: (B, n, H, D))
    return tuple(torch.empty(shape(n), dtype=dtype, device=device,
                             requires_grad=grad) for n in (Nq, Nk, Nk))


def test_ops_are_registered():
    fwd = torch.ops.kiln.attention_forward.default
    bwd = torch.ops.kiln.attention_backward.default
    assert "attention_forward(Tensor q, Tensor k, Tensor v, bool causal, float scale, bool bshd) -> (Tensor, Tensor)" in str(fwd._schema)
    assert str(bwd._schema).endswith("-> (Tensor, Tensor, Tensor)")


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fake_forward_shapes(layout, dtype):
    q, k, v = qkv(Nq=77, Nk=130, D=128, dtype=dtype, layout=layout)
    o, lse = kiln.attention(q, k, v, causal=True, layout=layout, return_lse=True)
    assert o.shape == q.shape and o.dtype == dtype and o.device.type == META
    assert lse.shape == (2, 3, 77) and lse.dtype == torch.float32


def test_fake_backward_shapes():
    q, k, v = qkv(Nq=50, Nk=90, grad=True)
    kiln.attention(q, k, v).sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape
    assert v.grad.shape == v.shape and v.grad.dtype == v.dtype


def test_lse_is_not_differentiable():
    q, k, v = qkv(grad=True)
    o, lse = kiln.attention(q, k, v, return_lse=True)
    assert o.requires_grad and not lse.requires_grad


def test_torch_compile_traces_one_graph():
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    f = torch.compile(lambda q, k, v: kiln.attention(q, k, v, causal=True,
                                                     layout="bshd") * 2,
                      backend=backend, fullgraph=True)
    out = f(*qkv(layout="bshd"))
    assert out.shape == (2, 100, 3, 64)
    assert len(graphs) == 1
    assert "torch.ops.kiln.attention_forward" in graphs[0].code


def test_linear_traces_as_one_op_under_torch_compile():
    # kiln.linear is torch.ops.kiln.linear to a trace, its fake result
    # shaped as the real one: rows padded to a multiple of 8 elements.
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    x = torch.empty(64, 768, dtype=torch.bfloat16, device=META)
    w = torch.empty(3001, 768, dtype=torch.bfloat16, device=META)
    b = torch.empty(3001, dtype=torch.bfloat16, device=META)
    y = kiln.linear(x, w.t(), b, activation="gelu")
    assert y.shape == (64, 3001) and y.stride() == (3008, 1)
    f = torch.compile(lambda x, w, b: kiln.linear(x, w.t(), b, "gelu") * 2,
                      backend=backend, fullgraph=True)
    assert f(x, w, b).shape == (64, 3001)
    assert len(graphs) == 1
    assert "torch.ops.kiln.linear" in graphs[0].code
    with pytest.raises(ValueError, match="bias must have shape"):
        kiln.linear(x, w.t(), b[:3000])


def test_norms_trace_as_ops_with_gradients():
    # Traced (meta tensors, torch.compile) the norms are torch.ops.kiln.
    # row_norm, differentiable through torch.ops.kiln.row_norm_backward:
    # fake results and gradients shaped as the real ones.
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    def params(grad):
        return [torch.empty(*s, dtype=torch.bfloat16, device=META,
                            requires_grad=grad)
                for s in ((4, 16, 300), (300,), (300,))]

    x, w, b = params(True)
    y = kiln.layer_norm(x, w, b)
    assert y.shape == x.shape and y.dtype == x.dtype
    y.float().sum().backward()
    for t in (x, w, b):
        assert t.grad.shape == t.shape and t.grad.dtype == t.dtype
    xd, wd, _ = params(False)
    f = torch.compile(lambda x, w: kiln.rms_norm(x, w, 1e-5) * 2,
                      backend=backend, fullgraph=True)
    assert f(xd, wd).shape == xd.shape
    assert len(graphs) == 1 and "torch.ops.kiln.row_norm" in graphs[0].code
    x, w, b = params(True)
    g = torch.compile(lambda x, w, b: kiln.layer_norm(x, w, b).float().sum(),
                      backend="aot_eager", fullgraph=True)
    g(x, w, b).backward()
    for t in (x, w, b):
        assert t.grad.shape == t.shape
    x, w, _ = params(True)
    (dw,) = torch.autograd.grad(kiln.rms_norm(x, w).float().sum(), (w,))
    assert dw.shape == w.shape
    with pytest.raises(ValueError, match=r"weight must have shape \(300,\)"):
        kiln.rms_norm(x, w[:-1])
    with pytest.raises(ValueError, match="kiln runs on CUDA tensors"):
        kiln.rms_norm(torch.zeros(2, 300, dtype=torch.bfloat16),
                      torch.zeros(300, dtype=torch.bfloat16))


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_rotary_traces_as_an_op_with_its_gradient(layout):
    # Traced, kiln.rotary is torch.ops.kiln.rotary, whose gradient is the
    # same op rotating back: fake results shaped as the real ones.
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    shape = (2, 100, 4, 64) if layout == "bshd" else (2, 4, 100, 64)
    x = torch.empty(shape, dtype=torch.bfloat16, device=META,
                    requires_grad=True)
    cos, sin = (torch.empty(4096, 32, device=META) for _ in range(2))
    pos = torch.empty(100, dtype=torch.int64, device=META)
    y = kiln.rotary(x, cos, sin, pos, layout=layout)
    assert y.shape == x.shape and y.dtype == x.dtype
    y.float().sum().backward()
    assert x.grad.shape == x.shape
    f = torch.compile(lambda x, c, s: kiln.rotary(x, c, s, layout=layout) * 2,
                      backend=backend, fullgraph=True)
    assert f(x.detach(), cos, sin).shape == x.shape
    assert len(graphs) == 1 and "torch.ops.kiln.rotary" in graphs[0].code
    x.grad = None
    g = torch.compile(lambda x: kiln.rotary(x, cos, sin, layout=layout).sum(),
                      backend="aot_eager", fullgraph=True)
    g(x).backward()
    assert x.grad.shape == x.shape
    with pytest.raises(ValueError, match="power of two"):
        kiln.rotary(x[..., :48], cos[:, :24], sin[:, :24], layout=layout)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_traces_as_an_op_with_its_gradient(reduction):
    # Traced, kiln.cross_entropy is torch.ops.kiln.cross_entropy_rows (each
    # row's loss), reduced by torch ops; its gradient is
    # torch.ops.kiln.cross_entropy_rows_backward.
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    logits = torch.empty(300, 5000, dtype=torch.bfloat16, device=META,
                         requires_grad=True)
    labels = torch.empty(300, dtype=torch.int64, device=META)
    loss = kiln.cross_entropy(logits, labels, reduction=reduction)
    assert loss.shape == ((300,) if reduction == "none" else ())
    assert loss.dtype == torch.float32
    loss.sum().backward()
    assert logits.grad.shape == logits.shape
    assert logits.grad.dtype == logits.dtype
    f = torch.compile(lambda x, y: kiln.cross_entropy(x, y,
                                                      reduction=reduction),
                      backend=backend, fullgraph=True)
    assert f(logits.detach(), labels).shape == loss.shape
    assert len(graphs) == 1
    assert "torch.ops.kiln.cross_entropy_rows" in graphs[0].code
    logits.grad = None
    g = torch.compile(lambda x, y: kiln.cross_entropy(
        x, y, reduction=reduction).sum(), backend="aot_eager", fullgraph=True)
    g(logits, labels).backward()
    assert logits.grad.shape == logits.shape
    with pytest.raises(ValueError, match="labels must have shape"):
        kiln.cross_entropy(logits, labels[:299])


def test_linear_takes_leading_dimensions_as_rows():
    # x (..., K), as F.linear's input: (B, S, K) and (K,) give (B, S, N)
    # and (N,), views of the padded rows; gradients keep x's shape.
    w = torch.empty(3001, 768, dtype=torch.bfloat16, device=META,
                    requires_grad=True)
    x = torch.empty(4, 16, 768, dtype=torch.bfloat16, device=META,
                    requires_grad=True)
    y = kiln.linear(x, w.t(), None, "gelu")
    assert y.shape == (4, 16, 3001) and y.stride() == (16 * 3008, 3008, 1)
    y.float().sum().backward()
    assert x.grad.shape == x.shape and w.grad.shape == w.shape
    v = torch.empty(768, dtype=torch.bfloat16, device=META)
    assert kiln.linear(v, w.t()).shape == (3001,)
    with pytest.raises(ValueError, match=r"x \(\.\.\., K\) and weight_t"):
        kiln.linear(x[..., :767], w.t())


@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
def test_linear_gradients_have_their_tensors_shapes(activation):
    # Differentiable in x, weight_t (either layout) and bias: the fake
    # backward gives each gradient its tensor's shape, eager and compiled.
    x = torch.empty(64, 768, dtype=torch.bfloat16, device=META,
                    requires_grad=True)
    w = torch.empty(3001, 768, dtype=torch.bfloat16, device=META,
                    requires_grad=True)
    b = torch.empty(3001, dtype=torch.bfloat16, device=META,
                    requires_grad=True)
    kiln.linear(x, w.t(), b, activation).float().sum().backward()
    assert x.grad.shape == x.shape and w.grad.shape == w.shape
    assert b.grad.shape == b.shape
    w_kn = torch.empty(768, 3001, dtype=torch.bfloat16, device=META,
                       requires_grad=True)
    f = torch.compile(lambda x, w: kiln.linear(x, w, None, activation).sum(),
                      backend="aot_eager", fullgraph=True)
    f(x, w_kn).backward()
    assert w_kn.grad.shape == w_kn.shape


@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_linear_eager_autograd_plumbing(monkeypatch, activation, layout):
    # The eager autograd Function's forward and backward with the GEMM
    # replaced by torch's (CPU, bf16): the gradients of x, the weight as it
    # is stored and the bias match torch's autograd of the same formula.
    from kiln import gemm

    def fake_gemm(a, b, act=0, bias=None, z=None):
        pre = a.float() @ b.float() + (0 if bias is None else bias.float())
        if z is not None:
            z.copy_(pre)
        out = {0: pre, 1: F.relu(pre),
               2: F.gelu(pre, approximate="tanh")}[act]
        return out.to(torch.bfloat16)

    monkeypatch.setattr(gemm, "_gemm", fake_gemm)
    monkeypatch.setattr(gemm, "_result",
                        lambda r, c, like: torch.empty(r, c,
                                                       dtype=torch.bfloat16))
    torch.manual_seed(3)
    x = torch.randn(20, 16).bfloat16().requires_grad_()
    w = torch.randn((12, 16) if layout == "nk" else (16, 12)).bfloat16()
    w.requires_grad_()
    b = torch.randn(12).bfloat16().requires_grad_()
    wt = w.t() if layout == "nk" else w
    act = gemm._ACTIVATIONS[activation]
    y = gemm._EagerLinear.apply(x, wt, b, act)
    g = torch.randn(20, 12).bfloat16()
    got = torch.autograd.grad(y, (x, w, b), g)
    want = torch.autograd.grad(fake_gemm(x, wt, act, b), (x, w, b), g)
    for a, r in zip(got, want):
        assert a.shape == r.shape
        assert (a.float() - r.float()).abs().max() <= \
            2e-2 * r.float().abs().max() + 1e-2


def test_linear_gemm_reads_operands_as_stored(monkeypatch):
    # Each GEMM operand goes to the kernel as it is stored: row-major as A
    # or B (padded rows included), column-major as AT or BT (its transpose,
    # the same memory); only other strides are copied.
    from kiln import gemm
    seen = {}
    monkeypatch.setattr(gemm, "_op",
                        lambda name, act, tensors, like, what:
                        seen.update(tensors))
    x = torch.randn(40, 64).bfloat16()
    w = torch.randn(24, 64).bfloat16()  # nn.Linear's (N, K)
    gemm._gemm(x, w.t())
    assert seen["A"] is x and seen["BT"].data_ptr() == w.data_ptr()
    seen.clear()
    dz = torch.randn(40, 24).bfloat16()
    gemm._gemm(x.t(), dz)  # a weight gradient, X^T dZ
    assert seen["AT"].data_ptr() == x.data_ptr() and seen["B"] is dz
    seen.clear()
    padded = torch.randn(40, 32).bfloat16()[:, :24]
    gemm._gemm(padded, w)
    assert seen["A"] is padded and seen["B"] is w
    seen.clear()
    gemm._gemm(x, w.t()[:, ::2])  # every second row of w: still BT
    assert seen["BT"].data_ptr() == w.data_ptr()
    seen.clear()
    b = torch.randn(64, 48).bfloat16()[:, ::2]  # every second column
    gemm._gemm(x, b)
    assert seen["B"].stride() == (24, 1) and torch.equal(seen["B"], b)


def test_torch_compile_with_autograd():
    f = torch.compile(lambda q, k, v: kiln.attention(q, k, v, causal=True),
                      backend="aot_eager", fullgraph=True)
    q, k, v = qkv(grad=True)
    f(q, k, v).sum().backward()
    assert q.grad.shape == q.shape


@pytest.mark.parametrize("make,exc,match", [
    (lambda: ("not a tensor",) + qkv()[1:], TypeError, "q must be a torch.Tensor, got str"),
    (lambda: qkv(dtype=torch.float32), TypeError, "q has dtype torch.float32"),
    (lambda: (qkv()[0],) + qkv(dtype=torch.float16)[1:], TypeError, "share one dtype"),
    (lambda: (torch.empty(2, 100, 64, dtype=torch.bfloat16, device=META),) + qkv()[1:],
     ValueError, r"q must be 4-D \(batch, heads, seq, head_dim\), got shape \(2, 100, 64\)"),
    (lambda: qkv(device="cpu"), ValueError, "q is on cpu; kiln runs on CUDA tensors"),
    (lambda: qkv(D=96), ValueError, "head_dim 96 is not supported"),
    (lambda: (qkv()[0], qkv(H=1)[1], qkv(H=1)[2]), ValueError, "grouped heads are not supported"),
    (lambda: (qkv()[0], qkv()[1], qkv(Nq=7)[2]), ValueError, "v .* must have k's shape"),
    (lambda: qkv(Nq=0), ValueError, "empty tensors"),
    (lambda: (torch.empty(2, 3, 64, 100, dtype=torch.bfloat16, device=META).transpose(2, 3),) + qkv()[1:],
     ValueError, "q's last dimension must be contiguous"),
])
def test_bad_input_is_refused(make, exc, match):
    with pytest.raises(exc, match=match):
        kiln.attention(*make())


def test_bad_options_are_refused():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="layout must be 'bhsd' or 'bshd', got 'sbhd'"):
        kiln.attention(q, k, v, layout="sbhd")
    with pytest.raises(TypeError, match="causal must be a bool, got int"):
        kiln.attention(q, k, v, causal=1)
    for scale in (0.0, -1.0, float("nan"), float("inf"), "0.1", True):
        with pytest.raises(ValueError, match="scale must be a positive finite number"):
            kiln.attention(q, k, v, scale=scale)


def packed(B=2, N=100, H=3, D=64, dtype=torch.bfloat16, device=META, grad=False):
    return torch.empty(B, N, 3, H, D, dtype=dtype, device=device, requires_grad=grad)


def test_packed_ops_are_registered_and_trace():
    fwd = torch.ops.kiln.attention_qkvpacked_forward.default
    bwd = torch.ops.kiln.attention_qkvpacked_backward.default
    assert "attention_qkvpacked_forward(Tensor qkv, bool causal, float scale) -> (Tensor, Tensor)" in str(fwd._schema)
    assert str(bwd._schema).endswith("-> Tensor")
    x = packed(N=77, D=128, grad=True)
    o, lse = kiln.attention_qkvpacked(x, causal=True, return_lse=True)
    assert o.shape == (2, 77, 3, 128) and lse.shape == (2, 3, 77) and not lse.requires_grad
    o.sum().backward()
    assert x.grad.shape == x.shape and x.grad.dtype == x.dtype
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    f = torch.compile(lambda x: kiln.attention_qkvpacked(x, causal=True) * 2,
                      backend=backend, fullgraph=True)
    assert f(packed()).shape == (2, 100, 3, 64)
    assert len(graphs) == 1 and "torch.ops.kiln.attention_qkvpacked_forward" in graphs[0].code
    g = torch.compile(lambda x: kiln.attention_qkvpacked(x), backend="aot_eager", fullgraph=True)
    y = packed(grad=True)
    g(y).sum().backward()
    assert y.grad.shape == y.shape


@pytest.mark.parametrize("make,exc,match", [
    (lambda: "qkv", TypeError, "qkv must be a torch.Tensor, got str"),
    (lambda: packed()[:, :, :2], ValueError, r"qkv must be \(batch, seq, 3, heads, head_dim\), got shape \(2, 100, 2, 3, 64\)"),
    (lambda: packed()[..., 0, :], ValueError, r"qkv must be \(batch, seq, 3, heads, head_dim\)"),
    (lambda: packed(dtype=torch.float32), TypeError, "q has dtype torch.float32"),
    (lambda: packed(D=80), ValueError, "head_dim 80 is not supported"),
    (lambda: packed(device="cpu"), ValueError, "q is on cpu"),
])
def test_packed_bad_input_is_refused(make, exc, match):
    with pytest.raises(exc, match=match):
        kiln.attention_qkvpacked(make())


def test_missing_library_is_named():
    # A fresh interpreter, so that no library is loaded yet.
    code = ("import kiln, kiln._lib as l\n"
            "try:\n    l.library()\nexcept RuntimeError as e:\n    print(e)\n")
    env = dict(os.environ, KILN_LIBRARY="/nonexistent/libkiln_c.so")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=here,
                         capture_output=True, text=True).stdout
    assert "cannot load libkiln_c.so" in out and "/nonexistent/libkiln_c.so (missing)" in out


def test_library_loads_without_a_gpu():
    # libkiln_c opens the CUDA driver only when it launches.
    if not os.path.exists(os.environ.get("KILN_LIBRARY", "")) and not any(
            os.path.exists(p) for p in kiln._lib._candidates()[:2]):
        pytest.skip("SKIPPED: libkiln_c.so is not built")
    # A fresh interpreter: in this one, GPU tests run before may have
    # compiled (test_library_gpu.py sorts first).
    code = ("import kiln\nprint(kiln.version(), *kiln.cache_stats())\n")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], cwd=here,
                         capture_output=True, text=True)
    assert out.stdout.split() == ["0.1.0", "0", "0"], out.stderr[-2000:]


def test_row_norm_backward_programs():
    # The partial rows of dW the norms' backward is tuned for, from one
    # place (kernels/Tunables.cpp) for Python, C++ and `kiln tune`: two per
    # SM, at most one a row, at least one.
    if not os.path.exists(os.environ.get("KILN_LIBRARY", "")) and not any(
            os.path.exists(p) for p in kiln._lib._candidates()[:2]):
        pytest.skip("SKIPPED: libkiln_c.so is not built")
    f = kiln._lib.row_norm_backward_programs
    assert [f(r, 132) for r in (1, 5, 264, 16384)] == [1, 5, 264, 264]
    assert f(0, 132) == 1 and f(100, 0) == 2


def test_cpp_autograd_builds_and_binds():
    # The eager path's C++ autograd Function, built against this torch (no
    # GPU needed to build it; it calls libkiln_c only when it launches).
    if os.environ.get("KILN_CPP_AUTOGRAD") == "0":
        pytest.skip("SKIPPED: KILN_CPP_AUTOGRAD=0 keeps the Python Function")
    if not any(os.path.exists(p) for p in
               [os.environ.get("KILN_LIBRARY", "")] + kiln._lib._candidates()[:2]):
        pytest.skip("SKIPPED: libkiln_c.so is not built")
    from kiln import _cpp
    m = _cpp.module()
    assert m is not None, "the C++ autograd path did not build (see stderr)"
    assert callable(m.attention) and callable(m.bind)
    # kiln_c_op's launches (kiln.linear, rotary, cross-entropy) from C++ too.
    assert callable(m.op) and callable(m.linear) and callable(m.bind_op)


def test_cpp_autograd_can_be_switched_off():
    code = "from kiln import _cpp\nprint(_cpp.module())\n"
    env = dict(os.environ, KILN_CPP_AUTOGRAD="0")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=here,
                         capture_output=True, text=True)
    assert out.stdout.strip() == "None", out.stdout + out.stderr
    assert "building" not in out.stderr
    out = subprocess.run([sys.executable, "-m", "kiln.build_cpp"], env=env,
                         cwd=here, capture_output=True, text=True)
    assert out.returncode == 0 and "nothing built" in out.stdout, out.stderr
    # Anything but 0 or 1 is refused, not taken as "on".
    env["KILN_CPP_AUTOGRAD"] = "false"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=here,
                         capture_output=True, text=True)
    assert out.returncode != 0, out.stdout
    assert "KILN_CPP_AUTOGRAD: 'false' is not 0 or 1" in out.stderr, out.stderr


def test_packed_tensors_match_the_struct():
    # The packed buffer holds, per tensor, exactly what kiln_c_tensor does.
    import ctypes
    from kiln import _lib
    a = torch.empty(2, 100, 3, 64)  # (B, N, H, D)
    b = torch.empty(2, 3, 100)
    keep, ptrs = _lib._packed([(a, True), (b, False)])
    I4 = ctypes.c_int64 * 4
    structs = (_lib._Tensor(a.data_ptr(), I4(2, 3, 100, 64), I4(19200, 64, 192, 1)),
               _lib._Tensor(b.data_ptr(), I4(2, 3, 100, 0), I4(300, 100, 1, 0)))
    for want, p in zip(structs, ptrs):
        assert ctypes.string_at(p, ctypes.sizeof(_lib._Tensor)) == bytes(want)


def test_norms_refuse_bad_arguments_before_any_launch():
    x = torch.empty(4, 256, dtype=torch.bfloat16)
    w = torch.empty(256, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="kiln.rms_norm: x is on cpu"):
        kiln.rms_norm(x, w)
    with pytest.raises(TypeError, match="kiln.layer_norm: x has dtype torch.float32"):
        kiln.layer_norm(x.float(), w, w)
    with pytest.raises(TypeError, match="kiln.layer_norm: bias must be a torch.Tensor"):
        kiln.layer_norm(x, w, None)
    with pytest.raises(TypeError, match="weight must be a torch.Tensor"):
        kiln.rms_norm(x, [1.0])


def test_fused_ops_refuse_bad_arguments_before_any_launch():
    x = torch.empty(2, 8, 4, 64, dtype=torch.bfloat16)
    cs = torch.empty(16, 32)
    with pytest.raises(ValueError, match="kiln.rotary: x is on cpu"):
        kiln.rotary(x, cs, cs)
    with pytest.raises(TypeError, match="kiln.rotary: x has dtype torch.float32"):
        kiln.rotary(x.float(), cs, cs)
    with pytest.raises(TypeError, match="kiln.cross_entropy: logits must be a torch.Tensor"):
        kiln.cross_entropy([1.0], torch.zeros(1, dtype=torch.int64))
    with pytest.raises(TypeError, match="kiln.cross_entropy: logits has dtype torch.float32"):
        kiln.cross_entropy(torch.empty(4, 10), torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="kiln.linear: x is on cpu"):
        kiln.linear(torch.empty(4, 8, dtype=torch.bfloat16), None)
    with pytest.raises(TypeError, match="kiln.linear: x has dtype torch.float16"):
        kiln.linear(torch.empty(4, 8, dtype=torch.float16), None)


def test_named_tensors_match_the_struct():
    from kiln import _lib

    class Named(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int),
                    ("rank", ctypes.c_int), ("tensor", _lib._Tensor)]
    assert ctypes.sizeof(Named) == _lib._NAMED.size
    assert Named.tensor.offset == 16


def test_bench_interleaves_the_peers_samples(monkeypatch):
    """kiln.bench's default: a sample of each peer in turn, the order
    reversed every round, each peer's figure the median of its own samples."""
    import kiln.bench as kb
    taken = []
    times = {"a": iter([5.0, 1.0, 3.0, 2.0]), "b": iter([9.0, 7.0, 8.0, 6.0])}
    monkeypatch.setattr(kb, "sample_ms", lambda fn, batch: next(times[fn()]))
    monkeypatch.setattr(kb.torch.cuda, "synchronize", lambda: None)
    fns = {n: (lambda n=n: taken.append(n) or n) for n in "ab"}
    ms = kb.bench_interleaved_ms(fns, warm=0, reps=4)
    assert "".join(taken) == "abbaabba"
    assert ms == {"a": 3.0, "b": 8.0}


def test_bench_order_names_each_peer_once():
    import kiln.bench as kb
    with pytest.raises(SystemExit) as e:
        kb.main(["--order", "kiln,sdpa_cudnn"])
    assert e.value.code == 2


def test_bench_names_a_failing_peer_and_times_the_rest(monkeypatch, capsys):
    """A peer that raises while its call is prepared gets NaN and a line
    naming it; the others are still timed in turn, each with its FLOPs."""
    import math
    import kiln.bench as kb
    monkeypatch.setattr(kb, "sample_ms", lambda fn, batch: fn())
    monkeypatch.setattr(kb.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(kb.torch.cuda, "empty_cache", lambda: None)

    def prepare(fn, q, k, v):
        if fn is None:
            raise RuntimeError("no kernel for this shape")
        return fn
    work = {"a": (lambda: 2.0, 0, 0, 0, 4e9), "b": (None, 0, 0, 0, 4e9),
            "c": (lambda: 0.5, 0, 0, 0, 1e9)}
    tf = kb.tflops_of(work, prepare, sequential=False, where="N=7")
    assert tf["a"] == 2.0 and tf["c"] == 2.0 and math.isnan(tf["b"])
    assert "# b N=7: RuntimeError: no kernel for this shape" in capsys.readouterr().out
    tf = kb.tflops_of(work, prepare, sequential=True)
    assert tf["a"] == 2.0 and math.isnan(tf["b"])


def test_bench_sustained_runs_each_peer_alone_before_its_samples(monkeypatch):
    """--sustained: a peer's calls for the given seconds, then its own
    samples, before the next peer's first call; not with --sequential."""
    import itertools
    import kiln.bench as kb
    calls = []
    monkeypatch.setattr(kb, "sample_ms", lambda fn, batch: fn())
    monkeypatch.setattr(kb.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(kb.torch.cuda, "empty_cache", lambda: None)
    clock = itertools.count(0.0, 0.2)
    monkeypatch.setattr(kb.time, "perf_counter", lambda: next(clock))
    work = {n: (lambda n=n: calls.append(n) or 1.0, 0, 0, 0, 1e9) for n in "ab"}
    tf = kb.tflops_of(work, lambda fn, q, k, v: fn, sequential=False, sustained=0.5)
    assert tf == {"a": 1.0, "b": 1.0}
    # 20 calls alone (two rounds of 10 before the clock passes 0.5 s), then
    # 30 samples, one peer after the other.
    assert "".join(calls) == "a" * 50 + "b" * 50
    with pytest.raises(SystemExit) as e:
        kb.main(["--sequential", "--sustained", "2"])
    assert e.value.code == 2


def test_bench_nearest_multiple_of_128():
    import kiln.bench as kb
    assert [kb.nearest_multiple(n) for n in (1, 1000, 1023, 2049, 3001, 4097, 8191)] == \
        [128, 1024, 1024, 2048, 2944, 4096, 8192]


def test_bench_pairs_rows_and_their_flops():
    """--pairs: NqxNk[xB] rows; causal FLOPs count the pairs a query attends
    to, top-left aligned (SDPA's is_causal); a bad item is a usage error."""
    import kiln.bench as kb
    assert kb.parse_pairs("4096x512,1x4096x64") == [(4096, 512, None), (1, 4096, 64)]
    assert kb.parse_pairs("") == []
    for bad in ("4096", "4096x0", "ax5", "1x2x3x4"):
        with pytest.raises(ValueError, match="--pairs"):
            kb.parse_pairs(bad)
    assert kb.attended_pairs(300, 16384, False) == 300 * 16384
    # Fewer queries than keys: query i sees keys 0..i.
    assert kb.attended_pairs(3, 10, True) == 1 + 2 + 3
    # More queries than keys: the rows past Nk see every key.
    assert kb.attended_pairs(5, 3, True) == 1 + 2 + 3 + 3 + 3
    assert kb.attended_pairs(4, 4, True) == sum(min(i + 1, 4) for i in range(4))
    with pytest.raises(SystemExit) as e:
        kb.main(["--pairs", "4096x"])
    assert e.value.code == 2


def test_keys_not_16_byte_aligned_are_copied(monkeypatch, capfd):
    # K or V whose base or a stride is not a multiple of 16 bytes would take
    # the compute warps' own copies (several times slower on an H200): the
    # op copies them to aligned memory first, differentiably, and
    # KILN_LOG=launch says so once per argument and reason.
    from kiln import ops
    aligned = torch.randn(2, 3, 10, 64).bfloat16()
    buf = torch.randn(1 + aligned.numel()).bfloat16()
    odd = buf[1:].view(aligned.shape)
    padded = torch.randn(2, 3, 10, 67).bfloat16()[..., :64]
    assert ops._misaligned(aligned) == ""
    assert ops._misaligned(odd) == "a base address 2 bytes past 16"
    assert "strides (2010, 670, 67, 1)" in ops._misaligned(padded)
    assert ops._aligned_copy("k", aligned) is aligned
    monkeypatch.setenv("KILN_LOG", "launch")
    ops._logged_copies.clear()
    leaf = padded.detach().requires_grad_()
    for _ in range(2):
        copy = ops._aligned_copy("v", leaf)
    assert copy.is_contiguous() and torch.equal(copy, padded)
    assert ops._misaligned(copy) == ""
    (grad,) = torch.autograd.grad(copy.float().sum(), leaf)
    assert torch.equal(grad, torch.ones_like(padded))
    err = capfd.readouterr().err
    assert err.count("kiln.attention: v is not 16-byte aligned") == 1, err


def test_linear_pads_rows_that_are_not_16_byte_aligned(monkeypatch, capfd):
    # A GEMM operand whose rows are not a multiple of 16 bytes (a weight of
    # N = 50257 columns) would be read one element at a time: kiln.linear
    # copies it into padded rows and passes the view of its columns.
    from kiln import gemm, ops
    aligned = torch.randn(5, 64).bfloat16()
    assert gemm._padded_rows("x", aligned) is aligned
    monkeypatch.setenv("KILN_LOG", "launch")
    ops._logged_copies.clear()
    for cols in (1, 7, 77):
        t = torch.randn(5, cols).bfloat16()
        for _ in range(2):
            p = gemm._padded_rows("weight_t", t)
        assert p.shape == t.shape and torch.equal(p, t)
        assert p.stride() == (-(-cols // 8) * 8, 1) and ops._misaligned(p) == ""
    # Rows padded already (kiln.linear's result for N = 3001): as they are.
    padded_view = torch.randn(5, 3008).bfloat16()[:, :3001]
    assert gemm._padded_rows("x", padded_view) is padded_view
    # A view at an odd offset with aligned strides: copied too.
    odd = torch.randn(5 * 64 + 1).bfloat16()[1:].view(5, 64)
    p = gemm._padded_rows("x", odd)
    assert torch.equal(p, odd) and ops._misaligned(p) == ""
    err = capfd.readouterr().err
    assert err.count("kiln.linear: weight_t is not 16-byte aligned") == 3, err
    assert err.count("kiln.linear: x is not 16-byte aligned") == 1, err


def test_library_copies_are_logged_and_trace(monkeypatch, capfd):
    # A tensor the kernels cannot take as it is laid out (strided norm rows,
    # rotary's x with batch and sequence not mergeable, logits without a
    # unit column stride) is copied first;
    # KILN_LOG=launch says so once per op, argument and strides. Under
    # torch.compile the copy is an op of the graph and nothing is printed
    # (a print would break the graph).
    from kiln import ops
    monkeypatch.setenv("KILN_LOG", "launch")
    ops._logged_copies.clear()

    def meta(*shape, dtype=torch.bfloat16):
        return torch.empty(*shape, dtype=dtype, device=META)

    x, w = meta(300, 8).t(), meta(300)
    cos = meta(4096, 32, dtype=torch.float32)
    q = meta(2, 4, 100, 64).transpose(0, 1)  # batch, heads swapped
    logits, labels = meta(300, 64).t(), meta(64, dtype=torch.int64)

    def block(x, q, logits):
        return (kiln.rms_norm(x, w).sum() + kiln.rotary(q, cos, cos).sum() +
                kiln.cross_entropy(logits, labels))

    for _ in range(2):
        block(x, q, logits)
    err = capfd.readouterr().err
    for line in ("kiln.rms_norm: x is not contiguous (strides (1, 8))",
                 "kiln.rotary: x cannot be seen as (heads, tokens, D)",
                 "kiln.cross_entropy: logits has no unit column stride"):
        assert err.count(line) == 1, (line, err)
    ops._logged_copies.clear()
    f = torch.compile(block, backend="eager", fullgraph=True)
    assert f(x, q, logits).shape == ()
    assert "kiln." not in capfd.readouterr().err
