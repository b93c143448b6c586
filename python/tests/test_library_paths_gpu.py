"""How kiln's library ops are reached, on the GPU: the C++ paths against
the Python paths bit for bit (tensors and nn.Parameters), CUDA-graph
replay, torch.compile and bf16 autocast (test_library_gpu.py: their
numerics against float64). Skipped, loudly, without a GPU."""
import pytest
import torch
import torch.nn.functional as F

import kiln

if not torch.cuda.is_available():
    pytest.skip("SKIPPED: no CUDA GPU: the GPU tests of kiln's library ops "
                "need one", allow_module_level=True)

from gpu_util import (DEV, assert_cpp_path_matches_python,  # noqa: E402
                      casts as _casts, poison_allocator, rel, rope_tables)


def test_linear_common_case_launches_from_cpp(monkeypatch):
    # Aligned bf16 operands with N a multiple of 8 are decided and launched
    # by the C++ extension (kiln._cpp); anything else returns None there and
    # takes the Python path. Both launch the same kernel: the same bits.
    from kiln import _cpp, fused
    cpp = _cpp.module()
    assert cpp is not None, "the C++ extension did not build"
    torch.manual_seed(10)
    x = torch.randn(64, 768, device=DEV).bfloat16()
    w = (torch.randn(3072, 768, device=DEV) / 30).bfloat16()
    b = torch.randn(3072, device=DEV).bfloat16()
    fast = cpp.linear(x, w.t(), b, 2)
    assert fast is not None and fast.shape == (64, 3072)
    assert cpp.linear(x, w.t().contiguous(), None, 0) is not None  # (K, N)
    assert cpp.linear(x, w[:3001].t(), None, 0) is None  # N % 8
    assert cpp.linear(x[:, :767], w[:, :767].t(), None, 0) is None  # K % 8
    assert cpp.linear(x.float(), w.t(), None, 0) is None
    assert cpp.linear(x, w.t(), b[:-8], 0) is None
    monkeypatch.setattr(fused._cpp, "module", lambda: None)
    slow = kiln.linear(x, w.t(), b, activation="gelu")
    assert torch.equal(fast, slow)


def test_library_ops_replay_in_a_cuda_graph():
    # Serving captures a step once and replays it: kiln.linear (the C++
    # path, both weight layouts, and the Python path's padded result),
    # rotary and cross-entropy launch nothing but their kernels once tuned,
    # so a replay on new inputs gives what eager calls give (the same
    # kernels: the same bits).
    torch.manual_seed(12)
    x = torch.randn(64, 768, device=DEV).bfloat16()
    w = (torch.randn(3072, 768, device=DEV) / 30).bfloat16()
    w_kn = w.t().contiguous()
    w_odd = (torch.randn(1001, 768, device=DEV) / 30).bfloat16()
    b = torch.randn(3072, device=DEV).bfloat16()
    q = torch.randn(2, 16, 4, 128, device=DEV).bfloat16()
    cos, sin = rope_tables(4096, 128)
    logits = torch.randn(64, 1000, device=DEV).bfloat16()
    labels = torch.randint(0, 1000, (64,), device=DEV)

    def step():
        return (kiln.linear(x, w.t(), b, activation="gelu"),
                kiln.linear(x, w_kn), kiln.linear(x, w_odd.t()),
                kiln.rotary(q, cos, sin),
                kiln.cross_entropy(logits, labels, reduction="none"))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # tunes, then runs warm
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    for t in (x, q, logits):
        t.copy_(torch.randn(t.shape, device=DEV))
    labels.copy_(torch.randint(0, 1000, (64,), device=DEV))
    for t in captured:
        t.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(captured, step()):
        assert torch.equal(got, want)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_linear_under_torch_compile(backend):
    # Compiled, kiln.linear runs as torch.ops.kiln.linear (the Python
    # path's body): the same kernel and bits as eager, padded result too.
    torch.manual_seed(13)
    x = torch.randn(200, 768, device=DEV).bfloat16()
    w = (torch.randn(3001, 768, device=DEV) / 30).bfloat16()
    b = torch.randn(3001, device=DEV).bfloat16()
    torch._dynamo.reset()
    f = torch.compile(lambda x, w, b: kiln.linear(x, w.t(), b, "gelu") + 1,
                      backend=backend, fullgraph=True)
    poison_allocator()
    got = f(x, w, b)
    want = kiln.linear(x, w.t(), b, "gelu") + 1
    assert torch.equal(got, want)


@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("tokens", [264, 4100])
def test_linear_gradient_runs_from_cpp_as_python_does(activation, layout,
                                                      tokens):
    # With a gradient, the common case is a C++ autograd Function
    # (csrc/linear.cpp) of the Python Function's kernels and formulas: the
    # same bits for Y, dX, dW and db, an expanded dY (from .sum()) too. The
    # weight and bias are nn.Parameters, as a layer's are. At 4100 tokens
    # dW takes split-K's partials, summed in the same order by both paths.
    from kiln import _cpp, fused
    assert _cpp.module() is not None, "the C++ extension did not build"
    torch.manual_seed(14)
    x = torch.randn(tokens, 768, device=DEV).bfloat16().requires_grad_()
    n = 1024 if tokens == 264 else 768  # dW 768x768 over 4100: 3 ranges
    shape = (n, 768) if layout == "nk" else (768, n)
    w = torch.nn.Parameter((torch.randn(shape, device=DEV) / 30).bfloat16())
    b = torch.nn.Parameter(torch.randn(n, device=DEV).bfloat16())
    g = torch.randn(tokens, n, device=DEV).bfloat16()
    wt = w.t() if layout == "nk" else w

    def run():
        poison_allocator()
        y = kiln.linear(x, wt, b, activation)
        grads = torch.autograd.grad(y, (x, w, b), g)
        y2 = kiln.linear(x, wt, b, activation)
        summed = torch.autograd.grad(y2.float().sum(), (w, b))
        return y, grads, summed, y.grad_fn.name()

    y, grads, summed, node = run()
    assert "CppNode" in node and "Linear" in node, node
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fused._cpp, "module", lambda: None)
        y_py, grads_py, summed_py, node_py = run()
    assert "CppNode" not in node_py, node_py
    assert torch.equal(y, y_py)
    for got, want in zip(grads + summed, grads_py + summed_py):
        assert got.shape == want.shape and torch.equal(got, want)
    # Only what autograd asks for: dX alone.
    (dx,) = torch.autograd.grad(kiln.linear(x, wt, b, activation), (x,), g)
    assert torch.equal(dx, grads[0])


def test_norms_common_case_launches_from_cpp(monkeypatch):
    # A contiguous bf16 (or float32) x with contiguous parameters (alike,
    # bf16 or float32) is checked and launched in C++ (csrc/norms.cpp);
    # anything else returns None there and the Python path checks it (and
    # names the problem). The same kernel: the same bits.
    from kiln import _cpp, norms
    cpp = _cpp.module()
    assert cpp is not None, "the C++ extension did not build"
    torch.manual_seed(15)
    x = torch.randn(4, 33, 768, device=DEV).bfloat16()
    w = torch.randn(768, device=DEV).bfloat16()
    b = torch.randn(768, device=DEV).bfloat16()
    rms = cpp.row_norm(0, x, w, None, 1e-6, False)
    ln = cpp.row_norm(1, x, w, b, 1e-5, False)
    assert rms is not None and ln is not None and rms.shape == x.shape
    assert cpp.row_norm(0, x.transpose(0, 1), w, None, 1e-6, False) is None
    assert cpp.row_norm(0, x.half(), w, None, 1e-6, False) is None
    assert cpp.row_norm(1, x, w.float(), b, 1e-5, False) is None  # unalike
    assert cpp.row_norm(0, x, w[:-8], None, 1e-6, False) is None
    assert cpp.row_norm(1, x, w, None, 1e-5, False) is None
    assert cpp.row_norm(0, x, w, None, float("nan"), False) is None
    with pytest.raises(ValueError, match="eps"):
        kiln.rms_norm(x, w, float("nan"))
    # With a gradient: a C++ Function (csrc/norms.cpp), the Python
    # Function's kernels and sums, an expanded dY (from .sum()) too; the
    # weight and bias nn.Parameters, as a layer's are.
    xg = x.clone().requires_grad_()
    wg, bg = torch.nn.Parameter(w.clone()), torch.nn.Parameter(b.clone())
    g = torch.randn_like(x)

    def grads():
        y = kiln.layer_norm(xg, wg, bg)
        out = (y, y.grad_fn.name(), *torch.autograd.grad(y, (xg, wg, bg), g),
               *torch.autograd.grad(kiln.rms_norm(xg, wg).sum(), (xg, wg)))
        return out[:2], out[2:]

    (y, fn), got = grads()
    assert "CppNode" in fn and "RowNorm" in fn, fn
    assert torch.equal(y, ln)
    monkeypatch.setattr(norms._cpp, "module", lambda: None)
    assert torch.equal(rms, kiln.rms_norm(x, w))
    assert torch.equal(ln, kiln.layer_norm(x, w, b))
    (y_py, fn_py), want = grads()
    assert "CppNode" not in fn_py and torch.equal(y_py, ln)
    for a, r in zip(got, want):
        assert a.shape == r.shape and torch.equal(a, r)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_rotary_common_case_runs_from_cpp_as_python_does(layout):
    # kiln.rotary's common case is checked and launched in C++ (with a
    # gradient a C++ Function): the same bits as the Python path, forward
    # and backward, default or given positions, a non-contiguous x (a slice
    # of a fused qkv) too; None for what the Python checks refuse.
    from kiln import _cpp, fused
    cpp = _cpp.module()
    assert cpp is not None, "the C++ extension did not build"
    torch.manual_seed(16)
    shape = (2, 300, 3 * 4, 64) if layout == "bshd" else (2, 3 * 4, 300, 64)
    qkv = torch.randn(shape, device=DEV).bfloat16()
    x = (qkv[:, :, :4] if layout == "bshd" else qkv[:, :4]).detach()
    cos, sin = rope_tables(4096, 64)
    pos = torch.randperm(4096, device=DEV)[:300]
    g = torch.randn_like(x.contiguous())
    bshd = layout == "bshd"

    def run():
        out = []
        for p in (None, pos, pos.int()):
            xg = x.detach().requires_grad_()
            y = kiln.rotary(xg, cos, sin, p, layout=layout)
            out += [y, kiln.rotary(x, cos, sin, p, layout=layout),
                    torch.autograd.grad(y, xg, g)[0], y.grad_fn.name()]
        return out

    assert_cpp_path_matches_python(run, fused)
    assert cpp.rotary(x.float(), cos, sin, None, bshd) is None
    assert cpp.rotary(x[..., :48], cos[:, :24].contiguous(),
                      sin[:, :24].contiguous(), None, bshd) is None
    assert cpp.rotary(x, cos.double(), sin.double(), None, bshd) is None
    assert cpp.rotary(x, cos, sin[:100], None, bshd) is None
    assert cpp.rotary(x, cos, sin, pos[:299], bshd) is None
    with pytest.raises(ValueError, match="power of two"):
        kiln.rotary(x[..., :48], cos[:, :24].contiguous(),
                    sin[:, :24].contiguous(), layout=layout)


def test_cross_entropy_common_case_runs_from_cpp_as_python_does():
    # kiln.cross_entropy's common case is checked and run in C++ (with a
    # gradient a C++ Function): the same bits as the Python path for each
    # reduction, ignored labels and a row-strided slice of logits too; None
    # for what the Python checks refuse, which then names the problem.
    from kiln import _cpp, fused
    cpp = _cpp.module()
    assert cpp is not None, "the C++ extension did not build"
    torch.manual_seed(17)
    wide = (3 * torch.randn(300, 5000 + 8, device=DEV)).bfloat16()
    logits = wide[:, :5000]  # row stride 5008
    labels = torch.randint(0, 5000, (300,), device=DEV)
    labels[::7] = -100

    gs = {"mean": torch.tensor(0.7, device=DEV), "sum": torch.tensor(
        1.3, device=DEV), "none": torch.rand(300, device=DEV) + 0.5}

    def run():
        out = []
        for reduction, g in gs.items():
            lg = logits.detach().requires_grad_()
            loss = kiln.cross_entropy(lg, labels, reduction=reduction)
            out += [loss, kiln.cross_entropy(logits, labels,
                                             reduction=reduction),
                    torch.autograd.grad(loss, lg, g)[0], loss.grad_fn.name()]
        return out

    assert_cpp_path_matches_python(run, fused)
    assert cpp.cross_entropy(logits.float(), labels, -100, 0) is None
    assert cpp.cross_entropy(logits, labels.int(), -100, 0) is None
    assert cpp.cross_entropy(logits, labels[:299], -100, 0) is None
    assert cpp.cross_entropy(logits.t().contiguous().t(), labels, -100,
                             0) is None
    with pytest.raises(ValueError, match="labels must have shape"):
        kiln.cross_entropy(logits, labels[:299])
    with pytest.raises(ValueError, match="reduction"):
        kiln.cross_entropy(logits, labels, reduction="avg")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_library_ops_under_torch_compile_match_eager(backend):
    # Compiled (fullgraph), the norms, rotary and cross-entropy run their
    # torch.library ops: outputs and gradients as the eager C++ path's,
    # inside a small block (norm, rotary of a projection, a loss).
    torch.manual_seed(18)
    cols = 256
    x = torch.randn(2, 64, cols, device=DEV).bfloat16().requires_grad_()
    w = torch.nn.Parameter(torch.randn(cols, device=DEV).bfloat16())
    b = torch.nn.Parameter(torch.randn(cols, device=DEV).bfloat16())
    cos, sin = rope_tables(4096, 64)
    labels = torch.randint(0, cols, (128,), device=DEV)
    labels[::5] = -100

    def block(x, w, b):
        h = kiln.layer_norm(x, w, b) + kiln.rms_norm(x, w)
        r = kiln.rotary(h.view(2, 64, 4, 64), cos, sin, layout="bshd")
        logits = r.reshape(128, cols)
        return (kiln.cross_entropy(logits, labels) +
                kiln.cross_entropy(logits, labels, reduction="none")[:7].sum())

    def run(fn):
        poison_allocator()
        loss = fn(x, w, b)
        return (loss, *torch.autograd.grad(loss, (x, w, b)))

    eager = run(block)
    compiled = run(torch.compile(block, backend=backend, fullgraph=True))
    for name, a, e in zip(("loss", "dx", "dw", "db"), compiled, eager):
        assert a.shape == e.shape and torch.isfinite(a).all(), name
        assert rel(a, e) < 1e-2, (name, rel(a, e))


def test_library_ops_under_bf16_autocast_take_float32():
    # Under torch.autocast("cuda", dtype=torch.bfloat16), float32 master
    # weights and a float32 residual stream reach kiln's ops: the norm reads
    # them as they are (bf16 y), the linear casts its weight to bf16 first.
    # The results against float64 of the values each kernel reads, float32
    # gradients.
    torch.manual_seed(20)
    x = torch.randn(2, 64, 256, device=DEV, requires_grad=True)
    w = torch.nn.Parameter(torch.randn(256, device=DEV))
    b = torch.nn.Parameter(torch.randn(256, device=DEV))
    wt = torch.nn.Parameter(torch.randn(256, 512, device=DEV) / 16)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = kiln.layer_norm(x, w, b)
        h = kiln.linear(y, wt)
    assert y.dtype == h.dtype == torch.bfloat16
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
    wtd = wt.detach().bfloat16().double().requires_grad_()
    yd = F.layer_norm(xd, (256,), wd, bd, 1e-5)
    hd = yd @ wtd
    assert rel(y, yd) < 1e-2 and rel(h, hd) < 2e-2
    h.float().sum().backward()
    hd.sum().backward()
    for t, td in zip((x, w, b, wt), (xd, wd, bd, wtd)):
        assert t.grad.dtype == torch.float32 and rel(t.grad, td.grad) < 3e-2


def test_autocast_casts_a_parameter_once_per_region():
    # Torch's autocast casts a float32 leaf once per autocast region (its
    # cache) and kiln's ops share that cache: a layer called three times in
    # one region (decoding, a shared layer) casts its weight and bias once,
    # layer.weight.t() included; after the region the cache is gone. The
    # gradient of the three calls is torch's (F.linear under autocast).
    torch.manual_seed(21)
    layer = torch.nn.Linear(256, 512, device=DEV)
    x = torch.randn(64, 256, device=DEV).bfloat16()

    def three(fn):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return sum(fn(x * (i + 1)).sum() for i in range(3))  # no casts

    kiln.linear(x, layer.weight.t().bfloat16())  # compiled, out of the count
    assert _casts(lambda: three(lambda a: kiln.linear(
        a, layer.weight.t(), layer.bias))) == 2
    assert _casts(lambda: three(layer)) == 2  # torch's own count
    three(lambda a: kiln.linear(a, layer.weight.t(), layer.bias)).backward()
    got = (layer.weight.grad.clone(), layer.bias.grad.clone())
    layer.zero_grad()
    three(layer).backward()
    assert torch.allclose(got[0], layer.weight.grad, rtol=1e-2, atol=1e-2)
    assert torch.allclose(got[1], layer.bias.grad, rtol=1e-2, atol=1e-2)
    # Norms read float32 weights and activations as they are: no casts; a
    # view other than a transpose is cast per call.
    w = torch.nn.Parameter(torch.randn(256, device=DEV))
    xs = torch.randn(64, 256, device=DEV)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert _casts(lambda: [kiln.rms_norm(x, w) for _ in range(3)]) == 0
        assert _casts(lambda: [kiln.rms_norm(xs, w) for _ in range(3)]) == 0
        wide = torch.nn.Parameter(torch.randn(512, 256, device=DEV) / 16)
        assert _casts(lambda: [kiln.linear(x, wide[:256].t())
                               for _ in range(2)]) == 2

