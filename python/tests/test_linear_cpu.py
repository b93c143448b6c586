"""kiln.linear without a GPU: its gradients' shapes and plumbing, the
GEMM's operands as stored, split-K's partial products and the rule that
decides them, rows padded to 16 bytes (the GPU tests: test_library_gpu.py,
test_library_paths_gpu.py)."""
import os

import pytest
import torch
import torch.nn.functional as F

import kiln

META = "meta"


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


def test_linear_split_k_sums_the_partial_products(monkeypatch):
    # A GEMM without epilogue that kiln splits in S ranges of K hands the
    # kernel C as (S, M, N) fp32 and returns their sum in bf16; with an
    # epilogue it is never split.
    from kiln import gemm
    seen = {}

    def fake_op(name, act, tensors, like, what):
        seen.update(tensors)
        c = tensors["C"]
        if c.dim() == 3:
            c.copy_(torch.arange(3, dtype=torch.float32).view(3, 1, 1) + 0.25)
    monkeypatch.setattr(gemm, "_op", fake_op)
    monkeypatch.setattr(gemm, "_split_k", lambda M, N, K, device: 3)
    x = torch.randn(40, 64).bfloat16()
    dz = torch.randn(40, 24).bfloat16()
    dw = gemm._gemm(x.t(), dz)
    assert seen["C"].shape == (3, 64, 24) and seen["C"].dtype == torch.float32
    assert dw.shape == (64, 24) and dw.dtype == torch.bfloat16
    assert torch.equal(dw, torch.full((64, 24), 3.75).bfloat16())
    seen.clear()
    gemm._gemm(x, dz.t(), bias=torch.randn(40).bfloat16())
    assert seen["C"].shape == (40, 40) and seen["C"].dtype == torch.bfloat16


def test_linear_split_k_rule():
    # The K ranges of a GEMM without epilogue, from one place
    # (kernels/Tunables.cpp) for Python and C++: 3 for a GPT layer's
    # 768x768 weight gradient over 16384 tokens on 132 SMs, 1 where the
    # tiles fill the waves or K is short.
    if not os.path.exists(os.environ.get("KILN_LIBRARY", "")) and not any(
            os.path.exists(p) for p in kiln._lib._candidates()[:2]):
        pytest.skip("SKIPPED: libkiln_c.so is not built")
    f = kiln._lib.linear_split_k
    assert f(768, 768, 16384, 132) == 3 and f(2304, 768, 16384, 132) == 1
    assert f(16384, 768, 3072, 132) == 1 and f(768, 768, 1000, 132) == 1


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


def test_split_partials_refuse_an_epilogue_before_any_launch():
    # The C API's "linear" with C (S, M, N) takes S >= 2 ranges' partial
    # products and no bias, Z or activation: refused, naming why, before a
    # GPU is asked for (here, none).
    if not os.path.exists(os.environ.get("KILN_LIBRARY", "")) and not any(
            os.path.exists(p) for p in kiln._lib._candidates()[:2]):
        pytest.skip("SKIPPED: libkiln_c.so is not built")
    a = torch.randn(64, 32).bfloat16()
    b = torch.randn(32, 48).bfloat16()
    why = "a C of three dimensions holds S >= 2 split-K partial products"
    for option, c, extra in (
            (1, torch.empty(3, 64, 48), {}),
            (0, torch.empty(3, 64, 48), {"Bias": torch.randn(48).bfloat16()}),
            (0, torch.empty(1, 64, 48), {})):
        with pytest.raises(ValueError, match=why):
            kiln._lib.op("linear", option, dict(A=a, B=b, C=c, **extra), 0, 0,
                         "kiln.linear")
