"""kiln's library ops (linear, the row norms, rotary, cross-entropy)
without a GPU: argument checks, the torch.library ops' fake
implementations and gradients, torch.compile tracing them, the copies
KILN_LOG names, the C structs (kiln.linear's gradients, operands and
split-K: test_linear_cpu.py)."""
import ctypes
import os

import pytest
import torch

import kiln

META = "meta"


def test_linear_traces_as_one_op_under_torch_compile(recorded_graphs):
    # kiln.linear is torch.ops.kiln.linear to a trace, its fake result
    # shaped as the real one: rows padded to a multiple of 8 elements.
    graphs, backend = recorded_graphs

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


def test_norms_trace_as_ops_with_gradients(recorded_graphs):
    # Traced (meta tensors, torch.compile) the norms are torch.ops.kiln.
    # row_norm, differentiable through torch.ops.kiln.row_norm_backward:
    # fake results and gradients shaped as the real ones.
    graphs, backend = recorded_graphs

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
    # No weight (nn.RMSNorm without elementwise_affine), no bias
    # (nn.LayerNorm(bias=False)) or neither: 1 and 0 stand in.
    for y in (kiln.rms_norm(x), kiln.layer_norm(x, w), kiln.layer_norm(x),
              kiln.layer_norm(x, None, b)):
        assert y.shape == x.shape
        (dx,) = torch.autograd.grad(y.float().sum(), (x,))
        assert dx.shape == x.shape
    with pytest.raises(ValueError, match=r"weight must have shape \(300,\)"):
        kiln.rms_norm(x, w[:-1])
    with pytest.raises(ValueError, match="kiln runs on CUDA tensors"):
        kiln.rms_norm(torch.zeros(2, 300, dtype=torch.bfloat16),
                      torch.zeros(300, dtype=torch.bfloat16))


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_rotary_traces_as_an_op_with_its_gradient(layout, recorded_graphs):
    # Traced, kiln.rotary is torch.ops.kiln.rotary, whose gradient is the
    # same op rotating back: fake results shaped as the real ones.
    graphs, backend = recorded_graphs

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
def test_cross_entropy_traces_as_an_op_with_its_gradient(reduction,
                                                        recorded_graphs):
    # Traced, kiln.cross_entropy is torch.ops.kiln.cross_entropy_rows (each
    # row's loss), reduced by torch ops; its gradient is
    # torch.ops.kiln.cross_entropy_rows_backward.
    graphs, backend = recorded_graphs

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


def test_norms_keep_float32_and_mixed_dtypes_when_traced():
    # float32 x and parameters (read as they are, fp32 math): y in x's
    # dtype, gradients in each input's; bf16 x with float32 parameters (a
    # layer's fp32 master weights) gives bf16 y; an absent bias stands in
    # in the weight's dtype. Meta tensors: what a trace sees.
    x = torch.empty(4, 16, 300, device=META, requires_grad=True)
    w = torch.empty(300, device=META, requires_grad=True)
    b = torch.empty(300, device=META, requires_grad=True)
    for y in (kiln.layer_norm(x, w, b), kiln.rms_norm(x, w),
              kiln.layer_norm(x, w)):
        assert y.dtype == torch.float32 and y.shape == x.shape
        dx, dw = torch.autograd.grad(y.sum(), (x, w))
        assert dx.dtype == dw.dtype == torch.float32
    xb = x.detach().bfloat16().requires_grad_()
    y = kiln.layer_norm(xb, w, b)
    assert y.dtype == torch.bfloat16
    dx, dw, db = torch.autograd.grad(y.float().sum(), (xb, w, b))
    assert dx.dtype == torch.bfloat16 and dw.dtype == db.dtype == torch.float32


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


def test_norms_refuse_bad_arguments_before_any_launch():
    x = torch.empty(4, 256, dtype=torch.bfloat16)
    w = torch.empty(256, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="kiln.rms_norm: x is on cpu"):
        kiln.rms_norm(x, w)
    with pytest.raises(TypeError, match="kiln.layer_norm: x has dtype torch.float16; "
                       "kiln takes torch.bfloat16 or torch.float32"):
        kiln.layer_norm(x.half(), w, w)
    with pytest.raises(TypeError, match="kiln.layer_norm: weight has dtype "
                       "torch.float32, bias torch.bfloat16; kiln takes them alike"):
        kiln.layer_norm(x, w.float(), w)
    with pytest.raises(TypeError, match="kiln.layer_norm: bias must be a torch.Tensor"):
        kiln.layer_norm(x, w, [0.0])
    with pytest.raises(TypeError, match="weight must be a torch.Tensor"):
        kiln.rms_norm(x, [1.0])
    # A 0-d or empty-row x is named, not the absent weight it leaves
    # without a stand-in.
    for bad in (torch.empty((), dtype=torch.bfloat16),
                torch.empty(3, 0, dtype=torch.bfloat16)):
        with pytest.raises(ValueError, match="x must have a last dimension"):
            kiln.rms_norm(bad)
        with pytest.raises(ValueError, match="x must have a last dimension"):
            kiln.layer_norm(bad)


def test_fused_ops_refuse_bad_arguments_before_any_launch():
    x = torch.empty(2, 8, 4, 64, dtype=torch.bfloat16)
    cs = torch.empty(16, 32)
    with pytest.raises(ValueError, match="kiln.rotary: x is on cpu"):
        kiln.rotary(x, cs, cs)
    with pytest.raises(TypeError, match="kiln.rotary: x has dtype torch.float32"):
        kiln.rotary(x.float(), cs, cs)
    # The default positions 0..N-1 past the table's rows would read cos =
    # sin = 0 (a zeroed token): refused before any launch.
    short = torch.empty(3, 32, device="meta")
    with pytest.raises(ValueError, match="cos and sin have 3 rows, fewer than "
                       "the 4 positions"):
        kiln.rotary(torch.empty(2, 4, 8, 64, dtype=torch.bfloat16,
                                device="meta"), short, short)
    with pytest.raises(TypeError, match="kiln.cross_entropy: logits must be a torch.Tensor"):
        kiln.cross_entropy([1.0], torch.zeros(1, dtype=torch.int64))
    for bad in (1.5, True, "1"):
        with pytest.raises(TypeError, match="ignore_index must be an int"):
            kiln.cross_entropy(torch.empty(4, 10, dtype=torch.bfloat16,
                                           device="meta"),
                               torch.empty(4, dtype=torch.int64, device="meta"),
                               ignore_index=bad)
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


def test_library_ops_cast_to_bf16_under_autocast(monkeypatch):
    # Under torch.autocast("cuda", dtype=torch.bfloat16) float32 inputs
    # (master weights, an fp32 residual stream) are cast to bf16 first
    # (the norms read them as they are and write bf16), differentiably:
    # float32 leaves get float32 gradients. Outside it the linear refuses
    # them, naming the dtype, and the norms keep float32.
    from kiln import ops

    def meta(*shape):
        return torch.empty(*shape, device=META, requires_grad=True)

    x, w, b = meta(4, 16, 64), meta(64), meta(64)
    assert kiln.layer_norm(x, w, b).dtype == torch.float32
    with pytest.raises(TypeError, match="dtype torch.float32"):
        kiln.linear(x, meta(64, 32))
    monkeypatch.setattr(ops, "_autocast_bf16", lambda: True)
    wt, lw = meta(64, 32), meta(32)
    cos = torch.empty(100, 8, device=META)
    y = kiln.layer_norm(x, w, b) + kiln.rms_norm(x, w)
    h = kiln.linear(y, wt, lw, "gelu")
    r = kiln.rotary(h.float().view(4, 16, 2, 16), cos, cos)
    loss = kiln.cross_entropy(r.float().view(64, 32),
                              torch.empty(64, dtype=torch.int64, device=META))
    assert y.dtype == h.dtype == r.dtype == torch.bfloat16
    assert loss.dtype == torch.float32
    loss.backward()
    for t in (x, w, b, wt, lw):
        assert t.grad.dtype == torch.float32 and t.grad.shape == t.shape


def test_gpt_example_runs_every_layer_through_kiln_traced(monkeypatch):
    # examples/gpt/train.py's "kiln_fused" model (fp32 parameters, bf16
    # autocast): every layer through kiln's ops; on meta tensors each
    # parameter gets a float32 gradient of its shape.
    import importlib.util
    from kiln import ops
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                        "gpt", "train.py")
    spec = importlib.util.spec_from_file_location("gpt_train", path)
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    monkeypatch.setattr(ops, "_autocast_bf16", lambda: True)
    model = train.model_for("kiln_fused", 64).to(META)
    x = torch.empty(2, 64, dtype=torch.int64, device=META)
    loss = model.loss(x, x)
    assert loss.shape == () and loss.dtype == torch.float32
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, name
        assert p.grad.dtype == torch.float32, name
