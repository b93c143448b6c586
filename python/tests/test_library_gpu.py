"""kiln's library ops on the GPU: the row norms, rotary embedding,
cross-entropy and the linear layer against float64 (outputs and
gradients; test_library_paths_gpu.py: the ways they are reached). Outputs
are written into memory the caching allocator has just had filled with
NaN. Skipped, loudly, without a GPU."""
import pytest
import torch
import torch.nn.functional as F

import kiln

if not torch.cuda.is_available():
    pytest.skip("SKIPPED: no CUDA GPU: the GPU tests of kiln's library ops "
                "need one", allow_module_level=True)

from gpu_util import DEV, casts, poison_allocator, rel, rope_tables  # noqa: E402


@pytest.mark.parametrize("cols", [512, 4096, 768, 300])
def test_norms_match_torch_in_float64(cols):
    # Rows of any length: 768 and 300 in tiles of 1024 and 512, masked.
    torch.manual_seed(cols)
    x = torch.randn(3, 77, cols, device="cuda").bfloat16()
    w = torch.randn(cols, device="cuda").bfloat16()
    b = torch.randn(cols, device="cuda").bfloat16()
    xd, wd, bd = x.double(), w.double(), b.double()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * wd
    assert rel(kiln.rms_norm(x, w), ref) < 1e-2
    ref = torch.nn.functional.layer_norm(xd, (cols,), wd, bd, 1e-5)
    assert rel(kiln.layer_norm(x, w, b), ref) < 1e-2


def rotary_reference(x, cos, sin, pos, layout):
    """x rotated in float64: x (B, N, H, D) or (B, H, N, D)."""
    xd = x.double()
    c, s = cos.double()[pos.long()], sin.double()[pos.long()]  # (N, D/2)
    if layout == "bshd":
        c, s = c[None, :, None, :], s[None, :, None, :]
    else:
        c, s = c[None, None], s[None, None]
    x1, x2 = xd.chunk(2, -1)
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("N,D", [(1001, 128), (64, 64)])
def test_rotary_matches_float64(layout, N, D):
    torch.manual_seed(N + D)
    shape = (2, N, 3, D) if layout == "bshd" else (2, 3, N, D)
    x = torch.randn(shape, device=DEV).bfloat16().requires_grad_()
    cos, sin = rope_tables(4096, D)
    pos = torch.randperm(4096, device=DEV)[:N]
    poison_allocator()
    for p in (None, pos):
        want_pos = torch.arange(N, device=DEV) if p is None else p
        y = kiln.rotary(x, cos, sin, p, layout=layout)
        assert rel(y, rotary_reference(x, cos, sin, want_pos, layout)) < 1e-2
    g = torch.randn_like(y)
    (dx,) = torch.autograd.grad(y, x, g)
    xd = x.detach().double().requires_grad_()
    yd = rotary_reference(xd, cos, sin, pos, layout)
    (want,) = torch.autograd.grad(yd, xd, g.double())
    assert rel(dx, want) < 1e-2


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("R,V", [(1000, 50257), (64, 32000)])
def test_cross_entropy_matches_float64(reduction, R, V):
    torch.manual_seed(R + V)
    logits = (3 * torch.randn(R, V, device=DEV)).bfloat16().requires_grad_()
    labels = torch.randint(0, V, (R,), device=DEV)
    labels[::7] = -100
    poison_allocator()
    loss = kiln.cross_entropy(logits, labels, reduction=reduction)
    ld = logits.detach().double().requires_grad_()
    want = F.cross_entropy(ld, labels, ignore_index=-100, reduction=reduction)
    assert rel(loss, want) < 1e-4
    g = torch.rand_like(want)
    (dx,) = torch.autograd.grad(loss, logits, g.float())
    (dwant,) = torch.autograd.grad(want, ld, g)
    assert rel(dx, dwant) < 1e-2
    assert torch.isfinite(dx).all()


@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_linear_matches_float64(activation):
    torch.manual_seed(7)
    x = torch.randn(1000, 768, device=DEV).bfloat16()
    w = (torch.randn(768, 3072, device=DEV) / 30).bfloat16()
    b = torch.randn(3072, device=DEV).bfloat16()
    poison_allocator()
    y = kiln.linear(x, w, b, activation=activation)
    want = x.double() @ w.double() + b.double()
    if activation == "gelu":
        want = F.gelu(want, approximate="tanh")
    assert rel(y, want) < 1e-2


@pytest.mark.parametrize("k, n", [(77, 1001), (768, 50257), (4095, 64)])
def test_linear_rows_not_16_byte_aligned(k, n):
    # Copied into padded rows first (gemm._padded_rows), then the fast path;
    # x also at an odd element offset.
    torch.manual_seed(8)
    x = torch.randn(257 * k + 1, device=DEV).bfloat16()[1:].view(257, k)
    w = (torch.randn(k, n, device=DEV) / 30).bfloat16()
    poison_allocator()
    y = kiln.linear(x, w)
    assert rel(y, x.double() @ w.double()) < 1e-2
    # The result's rows padded to a multiple of 8 too (written by TMA).
    assert y.shape == (257, n) and y.stride() == (-(-n // 8) * 8, 1)


@pytest.mark.parametrize("n, k", [(3072, 768), (50257, 768), (1001, 77)])
def test_linear_reads_nn_linear_weight_as_stored(n, k):
    # layer.weight.t() (the transpose of an (N, K) weight) goes to the kernel
    # as BT, the weight's own memory: the call allocates its result and no
    # weight-sized copy (K = 77 pads the weight's rows: a copy, still not
    # transposed; so does x).
    torch.manual_seed(9)
    x = torch.randn(300, k, device=DEV).bfloat16()
    w = (torch.randn(n, k, device=DEV) / 30).bfloat16()
    b = torch.randn(n, device=DEV).bfloat16()
    want = F.gelu(F.linear(x.double(), w.double(), b.double()),
                  approximate="tanh")
    poison_allocator()
    y = kiln.linear(x, w.t(), b, activation="gelu")  # tunes on first use
    assert rel(y, want) < 1e-2
    del y
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = kiln.linear(x, w.t(), b, activation="gelu")
    extra = torch.cuda.max_memory_allocated() - base
    result = 300 * (-(-n // 8) * 8) * 2
    assert extra >= result
    assert (extra >= result + n * k * 2) == (k % 8 != 0), extra
    assert rel(y, want) < 1e-2


@pytest.mark.parametrize("activation, m, k, n, layout", [
    ("none", 300, 768, 1024, "nk"), ("none", 300, 768, 1024, "kn"),
    ("relu", 300, 768, 1024, "nk"), ("gelu", 300, 768, 1024, "nk"),
    ("gelu", 300, 768, 1024, "kn"), ("gelu", 257, 77, 1001, "nk"),
    ("relu", 257, 77, 1001, "kn"), ("none", 4096, 768, 768, "nk"),
    ("gelu", 4100, 768, 768, "kn")])
def test_linear_gradients_match_float64(activation, m, k, n, layout):
    # dX, dW (as the weight is stored: nn.Linear's (N, K) or (K, N)) and db
    # through autograd, against float64 on the same bf16 values; ragged N
    # and K take the padded rows. At 4096 and 4100 rows dW (36 tiles of
    # 128x128 over a K of 4096) takes split-K's partial products.
    from kiln import _lib
    if m >= 4096:
        sms = torch.cuda.get_device_properties(DEV).multi_processor_count
        assert sms > 100 and _lib.linear_split_k(n, k, m, sms) == 3
    torch.manual_seed(m + k + n)
    x = torch.randn(m, k, device=DEV).bfloat16().requires_grad_()
    shape = (n, k) if layout == "nk" else (k, n)
    w = (torch.randn(shape, device=DEV) / 30).bfloat16().requires_grad_()
    b = torch.randn(n, device=DEV).bfloat16().requires_grad_()
    g = torch.randn(m, n, device=DEV).bfloat16()
    poison_allocator()
    y = kiln.linear(x, w.t() if layout == "nk" else w, b, activation)
    grads = torch.autograd.grad(y, (x, w, b), g)
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))

    def reference(x, bias):
        y = x @ (wd.t() if layout == "nk" else wd) + bias
        if activation == "relu":
            return F.relu(y)
        return F.gelu(y, approximate="tanh") if activation == "gelu" else y

    yd = reference(xd, bd)
    want = torch.autograd.grad(yd, (xd, wd, bd), g.double())
    assert rel(y, yd) < 1e-2
    for got, ref in zip(grads, want):
        assert got.shape == ref.shape and rel(got, ref) < 1e-2
    # No bias, the weight's gradient alone (x needs none).
    y2 = kiln.linear(x.detach(), w.t() if layout == "nk" else w, None,
                     activation)
    (dw,) = torch.autograd.grad(y2, (w,), g)
    (dw_ref,) = torch.autograd.grad(reference(xd.detach(), 0), (wd,),
                                    g.double())
    assert rel(dw, dw_ref) < 1e-2


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_linear_takes_leading_dimensions_as_rows(layout):
    # x (B, S, K), as F.linear's input: the same bits as the 2-D call on its
    # rows, from C++ and from Python, forward and gradient; a transposed
    # (non-contiguous) x and a 1-D x too.
    from kiln import fused
    torch.manual_seed(17)
    x = torch.randn(4, 66, 768, device=DEV).bfloat16()
    w = (torch.randn((1024, 768) if layout == "nk" else (768, 1024),
                     device=DEV) / 30).bfloat16()
    b = torch.randn(1024, device=DEV).bfloat16()
    wt = w.t() if layout == "nk" else w
    g = torch.randn(4, 66, 1024, device=DEV).bfloat16()
    want = kiln.linear(x.reshape(-1, 768), wt, b, "gelu").view(4, 66, 1024)
    x2 = x.reshape(-1, 768).clone().requires_grad_()
    (dx_want,) = torch.autograd.grad(kiln.linear(x2, wt, b, "gelu"), x2,
                                     g.reshape(-1, 1024))
    for cpp in (True, False):
        with pytest.MonkeyPatch.context() as mp:
            if not cpp:
                mp.setattr(fused._cpp, "module", lambda: None)
            poison_allocator()
            assert torch.equal(kiln.linear(x, wt, b, "gelu"), want), cpp
            xt = x.transpose(0, 1)
            assert torch.equal(kiln.linear(xt, wt, b, "gelu"),
                               want.transpose(0, 1)), cpp
            xg = x.clone().requires_grad_()
            y = kiln.linear(xg, wt, b, "gelu")
            (dx,) = torch.autograd.grad(y, xg, g)
            assert y.shape == (4, 66, 1024) and torch.equal(y, want), cpp
            assert torch.equal(dx, dx_want.view(4, 66, 768)), cpp
            v = kiln.linear(x[1, 2], wt, b, "gelu")
            ref = F.gelu(x[1, 2].double() @ wt.double() + b.double(),
                         approximate="tanh")
            assert v.shape == (1024,) and rel(v, ref) < 1e-2, cpp


@pytest.mark.parametrize("cols", [768, 4096, 300])
def test_norms_gradients_match_float64(cols):
    # dX, dW and dB through autograd against torch's float64 autograd of
    # the same formula on the same bf16 values; 231 rows (ragged against
    # every Config's rows per program), rows of any length; an expanded dY
    # (from .sum()) and a weight-only gradient too.
    torch.manual_seed(cols + 1)
    x = (2 * torch.randn(3, 77, cols, device=DEV)).bfloat16().requires_grad_()
    w = torch.randn(cols, device=DEV).bfloat16().requires_grad_()
    b = torch.randn(cols, device=DEV).bfloat16().requires_grad_()
    g = torch.randn(3, 77, cols, device=DEV).bfloat16()
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
    for kind in ("rms", "layer"):
        poison_allocator()
        if kind == "rms":
            y = kiln.rms_norm(x, w)
            yd = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * wd
            got = torch.autograd.grad(y, (x, w), g)
            want = torch.autograd.grad(yd, (xd, wd), g.double())
        else:
            y = kiln.layer_norm(x, w, b)
            yd = F.layer_norm(xd, (cols,), wd, bd, 1e-5)
            got = torch.autograd.grad(y, (x, w, b), g)
            want = torch.autograd.grad(yd, (xd, wd, bd), g.double())
        assert rel(y, yd) < 1e-2, kind
        for name, a, r in zip("xwb", got, want):
            assert a.shape == r.shape and torch.isfinite(a).all(), (kind, name)
            assert rel(a, r) < 1e-2, (kind, name)
    (dw,) = torch.autograd.grad(kiln.rms_norm(x.detach(), w).float().sum(), w)
    yd = xd.detach() * torch.rsqrt(
        xd.detach().pow(2).mean(-1, keepdim=True) + 1e-6) * wd
    (dw_ref,) = torch.autograd.grad(yd.sum(), wd)
    assert rel(dw, dw_ref) < 1e-2


def test_norms_without_weight_or_bias_match_float64():
    # weight None (nn.RMSNorm / nn.LayerNorm without elementwise_affine)
    # and bias None (nn.LayerNorm(bias=False)): 1 and 0 stand in; outputs
    # and dX against float64, from C++ and from Python.
    from kiln import norms
    torch.manual_seed(19)
    x = (2 * torch.randn(3, 77, 768, device=DEV)).bfloat16().requires_grad_()
    w = torch.randn(768, device=DEV).bfloat16()
    g = torch.randn(3, 77, 768, device=DEV).bfloat16()
    xd, wd = x.detach().double().requires_grad_(), w.double()
    cases = [
        (lambda: kiln.rms_norm(x),
         lambda: xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6)),
        (lambda: kiln.layer_norm(x),
         lambda: F.layer_norm(xd, (768,), None, None, 1e-5)),
        (lambda: kiln.layer_norm(x, w),
         lambda: F.layer_norm(xd, (768,), wd, None, 1e-5)),
    ]
    for off in (False, True):
        with pytest.MonkeyPatch.context() as mp:
            if off:
                mp.setattr(norms._cpp, "module", lambda: None)
            for run, ref in cases:
                poison_allocator()
                y, yd = run(), ref()
                assert rel(y, yd) < 1e-2
                (dx,) = torch.autograd.grad(y, x, g)
                (dxd,) = torch.autograd.grad(yd, xd, g.double())
                assert torch.isfinite(dx).all() and rel(dx, dxd) < 1e-2


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_norms_read_float32_as_it_is(kind, monkeypatch):
    # float32 x and parameters are read without rounding: y (float32) and
    # the float32 gradients within float32's error of float64 (a bf16 read
    # would be off by ~4e-3). bf16 x with float32 parameters: bf16 y. Under
    # bf16 autocast: bf16 y from the float32 values, float32 gradients, and
    # not one cast kernel forward or backward; the C++ and Python paths give
    # the same bits. A ragged row (3000 columns) and rows that are not a
    # multiple of the kernels' row blocks.
    from kiln import norms
    torch.manual_seed(22)
    x = torch.randn(3, 37, 3000, device=DEV) * 3 + 1
    w = torch.randn(3000, device=DEV)
    b = torch.randn(3000, device=DEV)
    layer = kind == "layer_norm"
    ps = (w, b) if layer else (w,)
    fn = getattr(kiln, kind)

    def ref(xv, *pv):
        return (F.layer_norm(xv, (3000,), *pv, 1e-5) if layer else
                F.rms_norm(xv, (3000,), pv[0], 1e-6))

    g = torch.randn_like(x)
    gb = g.bfloat16()  # cast here: the count below is the norm's alone

    def grads(y, xv, pv):
        return torch.autograd.grad(y, (xv,) + pv,
                                   gb if y.dtype == torch.bfloat16 else g)

    xg = x.clone().requires_grad_()
    pg = tuple(p.clone().requires_grad_() for p in ps)
    xd = x.double().requires_grad_()
    pd = tuple(p.double().requires_grad_() for p in ps)
    poison_allocator()
    y = fn(xg, *pg)
    yd = ref(xd, *pd)
    assert y.dtype == torch.float32 and rel(y, yd) < 1e-5, rel(y, yd)
    got, want = grads(y, xg, pg), grads(yd, xd, pd)
    for a, e in zip(got, want):
        assert a.dtype == torch.float32 and rel(a, e) < 1e-4, rel(a, e)
    yb = fn(x.bfloat16(), *ps)
    assert yb.dtype == torch.bfloat16
    assert rel(yb, ref(x.bfloat16().double(), *(p.double() for p in ps))) < 1e-2

    def autocast():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = fn(xg, *pg)
        return (y,) + grads(y, xg, pg)

    poison_allocator()
    fast = autocast()
    assert casts(autocast) == 0
    assert fast[0].dtype == torch.bfloat16 and rel(fast[0], yd) < 1e-2
    for a, e in zip(fast[1:], want):
        assert a.dtype == torch.float32 and rel(a, e) < 2e-2, rel(a, e)
    monkeypatch.setattr(norms._cpp, "module", lambda: None)
    slow = autocast()
    for a, e in zip(fast, slow):
        assert torch.equal(a, e)
