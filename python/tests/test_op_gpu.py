"""kiln.attention (and kiln.attention_qkvpacked) on the GPU against torch's
math attention in float64: outputs and gradients, both layouts, ragged and
unequal lengths; the custom
ops under torch.library.opcheck and torch.compile, inside a captured CUDA
graph, on a non-default stream; bitwise-repeatable gradients under
torch.use_deterministic_algorithms. Outputs are
written into memory the caching allocator has just had filled with NaN.
Skipped, loudly, without a GPU."""
import contextlib
import math

import pytest
import torch
import torch.nn.functional as F

import kiln

if not torch.cuda.is_available():
    pytest.skip("SKIPPED: no CUDA GPU: the GPU tests of kiln.attention need one",
                allow_module_level=True)

DEV = torch.device("cuda")


def poison_allocator(nbytes=256 << 20, device=DEV):
    """Leaves freed NaN blocks in torch's caching allocator (of `device`),
    which the next allocations (the op's outputs) reuse: an unwritten
    element stays NaN."""
    x = torch.full((nbytes // 4,), float("nan"), device=device)
    del x


@contextlib.contextmanager
def deterministic():
    """torch.use_deterministic_algorithms(True) for the block, then the mode
    as it was (dQ by its own kernel: the same bits on every run)."""
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was)


def make(B, H, Nq, Nk, D, dtype, layout, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    shape = (lambda n: (B, H, n, D)) if layout == "bhsd" else (lambda n: (B, n, H, D))
    return [torch.randn(shape(n), device=DEV, dtype=dtype, generator=g)
            for n in (Nq, Nk, Nk)]


def to_bhsd(t, layout):
    return t if layout == "bhsd" else t.transpose(1, 2)


def reference(q, k, v, causal, layout, grad_o):
    """Output and gradients by torch's math attention in float64."""
    qd, kd, vd = (to_bhsd(t, layout).detach().double().requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal)
    o.backward(to_bhsd(grad_o, layout).double())
    back = lambda t: t if layout == "bhsd" else t.transpose(1, 2)
    return back(o.detach()), [back(t.grad) for t in (qd, kd, vd)]


def rel(a, b):
    """Relative error; against a reference that is all zeros (dQ and dK with
    one key), the error relative to 1."""
    a, b = a.double(), b.double()
    return ((a - b).norm() / max(b.norm().item(), 1.0)).item()


CASES = [  # B, H, Nq, Nk, D, causal, dtype, layout
    (2, 3, 1000, 1000, 64, False, torch.bfloat16, "bhsd"),
    (2, 3, 1000, 1000, 64, True, torch.bfloat16, "bshd"),
    (1, 4, 3001, 3001, 128, True, torch.bfloat16, "bhsd"),
    (1, 2, 4097, 4097, 128, False, torch.float16, "bshd"),
    (2, 2, 700, 1100, 128, False, torch.bfloat16, "bhsd"),
    (1, 2, 513, 257, 64, True, torch.float16, "bhsd"),
    (1, 1, 1, 1, 128, False, torch.bfloat16, "bhsd"),
]


@pytest.mark.parametrize("B,H,Nq,Nk,D,causal,dtype,layout", CASES)
def test_matches_float64_math(B, H, Nq, Nk, D, causal, dtype, layout):
    q, k, v = make(B, H, Nq, Nk, D, dtype, layout, seed=Nq * 7 + D + causal)
    for t in (q, k, v):
        t.requires_grad_()
    grad_o = torch.randn_like(q)
    poison_allocator()
    o = kiln.attention(q, k, v, causal=causal, layout=layout)
    poison_allocator()
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), grad_o)
    o_ref, grads_ref = reference(q, k, v, causal, layout, grad_o)
    assert o.shape == q.shape and o.dtype == dtype
    for name, got, want in (("o", o, o_ref), ("dq", dq, grads_ref[0]),
                            ("dk", dk, grads_ref[1]), ("dv", dv, grads_ref[2])):
        assert torch.isfinite(got).all(), f"{name}: unwritten or non-finite elements"
        tol = 1e-2 if dtype == torch.bfloat16 else 4e-3
        assert rel(got, want) < (tol if name == "o" else 2 * tol), name


def view_of(t, kind):
    """t's values in a view users hand over: at an odd element offset (a
    pointer that is not 16-byte aligned) or with rows padded by 3 elements
    (strides that are not multiples of 16 bytes)."""
    pad, offset = (3, 0) if kind == "padded" else (0, 1)
    buf = torch.empty(offset + t.numel() // t.shape[-1] * (t.shape[-1] + pad),
                      device=t.device, dtype=t.dtype)
    view = buf[offset:].view(*t.shape[:-1], t.shape[-1] + pad)[..., :t.shape[-1]]
    view.copy_(t)
    return view


@pytest.mark.parametrize("D,causal,layout,which,kind", [
    (128, True, "bhsd", "v", "offset"), (128, True, "bshd", "k", "padded"),
    (128, False, "bshd", "v", "padded"), (64, True, "bhsd", "q", "offset"),
    (64, False, "bshd", "kv", "padded"), (128, False, "bhsd", "qkv", "offset")])
def test_views_that_are_not_aligned(D, causal, layout, which, kind, monkeypatch,
                                    capfd):
    # Q that misses the 16-byte specialisation takes loads of its own (K
    # and V keep TMA and the producer warpgroup); K and V are copied to
    # aligned memory first (their own loads spill), which KILN_LOG=launch
    # says. (scripts/fuzz-attention.py, which calls the kernels directly,
    # found D=128 with K or V not aligned failing to compile.)
    q, k, v = make(2, 3, 1001, 1001, D, torch.bfloat16, layout, seed=D + causal)
    q, k, v = (view_of(t, kind) if name in which else t
               for name, t in zip("qkv", (q, k, v)))
    for t in (q, k, v):
        t.requires_grad_()
    grad_o = torch.randn(q.shape, device=DEV, dtype=q.dtype)
    poison_allocator()
    monkeypatch.setenv("KILN_LOG", "launch")
    kiln.ops._logged_copies.clear()
    o = kiln.attention(q, k, v, causal=causal, layout=layout)
    err = capfd.readouterr().err
    for name in "kv":
        said = f"kiln.attention: {name} is not 16-byte aligned" in err
        assert said == (name in which), err
    poison_allocator()
    grads = torch.autograd.grad(o, (q, k, v), grad_o)
    o_ref, grads_ref = reference(q, k, v, causal, layout, grad_o)
    for name, got, want in zip(("o", "dq", "dk", "dv"), (o, *grads),
                               (o_ref, *grads_ref)):
        assert torch.isfinite(got).all(), f"{name}: unwritten or non-finite elements"
        assert rel(got, want) < (1e-2 if name == "o" else 2e-2), name


@pytest.mark.parametrize("B,H,N,D,causal,dtype", [
    (2, 3, 1000, 64, True, torch.bfloat16), (1, 2, 513, 128, False, torch.float16)])
def test_qkvpacked_matches_float64_math_and_the_unpacked_op(B, H, N, D, causal, dtype):
    g = torch.Generator(device=DEV).manual_seed(N + D)
    qkv = torch.randn(B, N, 3, H, D, device=DEV, dtype=dtype, generator=g).requires_grad_()
    grad_o = torch.randn(B, N, H, D, device=DEV, dtype=dtype, generator=g)
    poison_allocator()
    o = kiln.attention_qkvpacked(qkv, causal=causal)
    poison_allocator()
    (dqkv,) = torch.autograd.grad(o, qkv, grad_o)
    q, k, v = qkv.unbind(2)
    o_ref, grads_ref = reference(q, k, v, causal, "bshd", grad_o)
    tol = 1e-2 if dtype == torch.bfloat16 else 4e-3
    assert o.shape == (B, N, H, D) and dqkv.shape == qkv.shape
    assert torch.isfinite(o).all() and torch.isfinite(dqkv).all()
    assert rel(o, o_ref) < tol
    for i, name in enumerate("qkv"):
        assert rel(dqkv[:, :, i], grads_ref[i]) < 2 * tol, "d" + name
    # The unpacked op on the same views runs the same kernels.
    o2 = kiln.attention(q, k, v, causal=causal, layout="bshd")
    assert torch.equal(o, o2)
    grads = torch.autograd.grad(o2, (q, k, v), grad_o)
    for i in range(3):
        assert rel(dqkv[:, :, i], grads[i]) < 1e-3


def test_qkvpacked_opcheck_and_compile():
    qkv = torch.randn(1, 300, 3, 2, 64, device=DEV, dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.kiln.attention_qkvpacked_forward.default, (qkv, True, 0.125))
    o, lse = torch.ops.kiln.attention_qkvpacked_forward(qkv, True, 0.125)
    torch.library.opcheck(torch.ops.kiln.attention_qkvpacked_backward.default,
                          (torch.randn_like(o), qkv, o, lse, True, 0.125))
    x = qkv.clone().requires_grad_()
    f = lambda x: kiln.attention_qkvpacked(x, causal=True).float().square().sum()
    eager = torch.autograd.grad(f(x), x)[0]
    compiled = torch.autograd.grad(torch.compile(f, fullgraph=True)(x), x)[0]
    assert rel(compiled, eager) < 1e-3


def test_lse_matches():
    q, k, v = make(2, 3, 1000, 1000, 128, torch.bfloat16, "bhsd", seed=3)
    o, lse = kiln.attention(q, k, v, causal=True, return_lse=True)
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(128)
    s.masked_fill_(torch.ones(1000, 1000, dtype=torch.bool, device=DEV).triu(1), float("-inf"))
    assert rel(lse, torch.logsumexp(s, -1)) < 1e-5


SPLIT_CASES = [  # B, H, Nq, Nk, D: row blocks too few to fill the SMs
    (1, 16, 1, 32768, 128),  # decoding one long sequence
    (1, 32, 1, 4097, 64),
    (1, 16, 128, 16384, 128),  # short queries on long keys
    (2, 4, 100, 3001, 64),
]


def profiled_kernels(f):
    """Names of the CUDA kernels f() launches."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        f()
        torch.cuda.synchronize()
    return sorted(e.name for e in prof.events()
                  if e.device_type == torch.autograd.DeviceType.CUDA)


@pytest.mark.parametrize("B,H,Nq,Nk,D", SPLIT_CASES)
def test_few_row_blocks_split_the_keys(B, H, Nq, Nk, D):
    # The forward splits the keys in ranges (two kernels, a workspace) where
    # its row blocks leave SMs idle; O and LSE as one kernel's.
    q, k, v = make(B, H, Nq, Nk, D, torch.bfloat16, "bhsd", seed=Nk + Nq)
    scale = 1 / math.sqrt(D)
    assert kiln._lib.forward_workspace(q, k, False, scale, False) > 0
    poison_allocator()
    o, lse = kiln.attention(q, k, v, return_lse=True)
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    lse_ref = torch.logsumexp(s, -1)
    o_ref = torch.softmax(s, -1) @ v.double()
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()
    assert rel(o, o_ref) < 1e-2
    assert rel(lse, lse_ref) < 1e-5
    names = profiled_kernels(lambda: kiln.attention(q, k, v))
    assert names == ["attention_fwd_combine", "attention_fwd_split"], names


def test_split_keys_gradients_and_cuda_graph():
    # The backward reads the combined O and LSE; a captured decoding step
    # replays both kernels on new inputs.
    B, H, Nq, Nk, D = 1, 8, 64, 5000, 128
    q, k, v = make(B, H, Nq, Nk, D, torch.bfloat16, "bhsd", seed=29)
    assert kiln._lib.forward_workspace(q, k, False, 1 / math.sqrt(D), False) > 0
    for t in (q, k, v):
        t.requires_grad_()
    grad_o = torch.randn_like(q)
    poison_allocator()
    o = kiln.attention(q, k, v)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), grad_o)
    o_ref, grads_ref = reference(q, k, v, False, "bhsd", grad_o)
    assert rel(o, o_ref) < 1e-2
    for got, want in zip((dq, dk, dv), grads_ref):
        assert rel(got, want) < 2e-2
    check_graph_replay(B, H, Nq, Nk, D, False, seed=31)


def test_opcheck():
    q, k, v = make(1, 2, 300, 300, 64, torch.bfloat16, "bhsd", seed=5)
    torch.library.opcheck(torch.ops.kiln.attention_forward.default, (q, k, v, True, 0.125, False))
    o, lse = torch.ops.kiln.attention_forward(q, k, v, True, 0.125, False)
    torch.library.opcheck(torch.ops.kiln.attention_backward.default,
                          (torch.randn_like(o), q, k, v, o, lse, True, 0.125, False))


def test_torch_compile_matches_eager():
    q, k, v = make(2, 4, 1000, 1000, 64, torch.bfloat16, "bshd", seed=9)
    for t in (q, k, v):
        t.requires_grad_()
    f = lambda q, k, v: kiln.attention(q, k, v, causal=True, layout="bshd").float().square().sum()
    compiled = torch.compile(f, fullgraph=True)
    eager_grads = torch.autograd.grad(f(q, k, v), (q, k, v))
    compiled_grads = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    for a, b in zip(eager_grads, compiled_grads):
        assert torch.equal(a, b)


def check_graph_replay(B, H, Nq, Nk, D, causal, seed):
    """kiln.attention captured in a CUDA graph, replayed on new inputs copied
    in place, against the fp64 reference."""
    q, k, v = make(B, H, Nq, Nk, D, torch.bfloat16, "bhsd", seed)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture (compile, load)
        kiln.attention(q, k, v, causal=causal)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        o = kiln.attention(q, k, v, causal=causal)
    for new_seed in (seed + 1, seed + 2):  # new inputs in place, then replay
        for t, n in zip((q, k, v), make(B, H, Nq, Nk, D, torch.bfloat16, "bhsd", new_seed)):
            t.copy_(n)
        o.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        o_ref, _ = reference(q, k, v, causal, "bhsd", torch.zeros_like(q))
        assert rel(o, o_ref) < 1e-2


def test_cuda_graph_capture_and_replay():
    check_graph_replay(2, 4, 1000, 1000, 128, True, seed=11)


def test_runs_on_the_current_stream():
    q, k, v = make(2, 4, 2048, 2048, 128, torch.bfloat16, "bhsd", seed=13)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        # Written on s just before: a launch on another stream could read
        # the old values.
        q2 = q * 2
        o = kiln.attention(q2, k, v)
    s.synchronize()
    o_ref, _ = reference(q * 2, k, v, False, "bhsd", torch.zeros_like(q))
    assert rel(o, o_ref) < 1e-2


@pytest.mark.parametrize("D", [64, 128])
def test_gradients_are_bitwise_repeatable_when_asked(D):
    # D=64's default takes dQ by atomics; torch's deterministic mode asks
    # for the schedule without them.
    q, k, v = make(2, 4, 1500, 1500, D, torch.bfloat16, "bhsd", seed=17)
    for t in (q, k, v):
        t.requires_grad_()
    o = kiln.attention(q, k, v, causal=True)
    grad_o = torch.randn_like(o)
    with deterministic():
        first = torch.autograd.grad(o, (q, k, v), grad_o, retain_graph=True)
        second = torch.autograd.grad(o, (q, k, v), grad_o, retain_graph=True)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    atomic = torch.autograd.grad(o, (q, k, v), grad_o)
    for a, b in zip(first, atomic):
        assert rel(a, b) < 1e-2


@pytest.mark.parametrize("packed", [False, True])
def test_backward_launches_only_its_kernels(packed):
    # Eager autograd makes no zeros for LSE's unused gradient: the backward
    # is kiln's delta, dK/dV and dQ-conversion kernels and nothing else.
    if packed:
        g = torch.Generator(device=DEV).manual_seed(5)
        qkv = torch.randn(1, 300, 3, 2, 64, device=DEV, dtype=torch.bfloat16,
                          generator=g).requires_grad_()
        inputs = (qkv,)
        o = kiln.attention_qkvpacked(qkv)
    else:
        inputs = tuple(t.requires_grad_() for t in
                       make(1, 2, 300, 300, 64, torch.bfloat16, "bhsd", 5))
        o = kiln.attention(*inputs)
    grad_o = torch.randn_like(o)
    torch.autograd.grad(o, inputs, grad_o, retain_graph=True)
    names = profiled_kernels(lambda: torch.autograd.grad(o, inputs, grad_o))
    assert names == ["attention_bwd_delta", "attention_bwd_dkdv",
                     "attention_bwd_dq_convert"], names


@pytest.mark.parametrize("packed", [False, True])
def test_eager_autograd_runs_from_cpp(packed):
    # The eager path records a C++ autograd node: its backward runs in
    # autograd's device thread without Python.
    from kiln import _cpp
    assert _cpp.module() is not None, "the C++ autograd path did not build"
    if packed:
        o = kiln.attention_qkvpacked(torch.randn(
            1, 300, 3, 2, 64, device=DEV, dtype=torch.bfloat16,
            requires_grad=True))
    else:
        o = kiln.attention(*(t.requires_grad_() for t in make(
            1, 2, 300, 300, 64, torch.bfloat16, "bhsd", 6)))
    assert "CppNode" in o.grad_fn.name(), o.grad_fn.name()


def o_and_grads(run, inputs, grad_o):
    """O = run(*leaves) on fresh leaves cloned from `inputs`, and its
    gradients with respect to them, written into poisoned memory."""
    poison_allocator()
    x = [t.detach().clone().requires_grad_() for t in inputs]
    o = run(*x)
    return [o, *torch.autograd.grad(o, x, grad_o)]


def test_cpp_and_python_packed_autograd_agree_bit_for_bit():
    from kiln import packed
    g = torch.Generator(device=DEV).manual_seed(8)
    qkv = torch.randn(2, 421, 3, 3, 128, device=DEV, dtype=torch.bfloat16,
                      generator=g)
    grad_o = torch.randn(2, 421, 3, 128, device=DEV, dtype=torch.bfloat16,
                         generator=g)
    with deterministic():
        results = [o_and_grads(run, [qkv], grad_o) for run in (
            lambda t: kiln.attention_qkvpacked(t, causal=True),
            lambda t: packed._EagerPacked.apply(t, True,
                                                1.0 / math.sqrt(128))[0])]
    for name, a, b in zip(("o", "dqkv"), *results):
        assert torch.isfinite(a).all(), name
        assert torch.equal(a, b), name


@pytest.mark.parametrize("layout,causal,dtype", [
    ("bhsd", False, torch.bfloat16), ("bshd", True, torch.float16),
    ("bhsd", True, torch.bfloat16)])
def test_cpp_and_python_autograd_agree_bit_for_bit(layout, causal, dtype):
    # The same launches from C++ and from the Python Function: O and the
    # gradients equal bit for bit (deterministic dQ, no atomics' order).
    from kiln import ops
    q, k, v = make(2, 3, 333, 517, 64 if layout == "bhsd" else 128, dtype,
                   layout, 7)
    grad_o = torch.randn_like(q)
    scale, bshd = 1.0 / math.sqrt(q.shape[-1]), layout == "bshd"
    with deterministic():
        results = [o_and_grads(run, (q, k, v), grad_o) for run in (
            lambda *t: kiln.attention(*t, causal=causal, layout=layout),
            lambda *t: ops._EagerAttention.apply(*t, causal, scale, bshd)[0])]
    for name, a, b in zip(("o", "dq", "dk", "dv"), *results):
        assert torch.isfinite(a).all(), name
        assert torch.equal(a, b), name


@pytest.mark.parametrize("packed", [False, True])
def test_compiled_autograd_takes_the_eager_node(packed):
    # torch dynamo's compiled autograd over an eager forward: the same
    # gradients as autograd's own engine (deterministic dQ).
    import torch._dynamo.compiled_autograd as ca
    enable = getattr(ca, "_enable", None) or getattr(ca, "enable")
    g = torch.Generator(device=DEV).manual_seed(9)
    if packed:
        inputs = [torch.randn(2, 300, 3, 4, 64, device=DEV,
                              dtype=torch.bfloat16, generator=g)]
        run = lambda x: kiln.attention_qkvpacked(x[0], causal=True)
    else:
        inputs = make(2, 4, 300, 300, 64, torch.bfloat16, "bhsd", 9)
        run = lambda x: kiln.attention(*x, causal=True)
    grads = []
    with deterministic():
        for compiled in (False, True):
            x = [t.detach().clone().requires_grad_() for t in inputs]
            loss = (run(x).float() ** 2).sum()
            if compiled:
                with enable(torch.compile(backend="eager")):
                    loss.backward()
            else:
                loss.backward()
            grads.append([t.grad for t in x])
    for a, b in zip(*grads):
        assert torch.isfinite(a).all() and torch.equal(a, b)


def test_one_compile_serves_every_length():
    # Lengths of one class: D=64 non-causal past 1024 keys (up to 1024 the
    # default loads Q by one-shot TMA, another kernel).
    # B=4, 32 heads: row blocks enough to fill the SMs' waves (fewer split
    # the keys, a kernel per number of ranges).
    kiln.attention(*make(4, 32, 1100, 1100, 64, torch.bfloat16, "bhsd", 1))
    _, before = kiln.cache_stats()
    for n in (1500, 2100, 3001, 5000):
        kiln.attention(*make(4, 32, n, n, 64, torch.bfloat16, "bhsd", n))
    _, after = kiln.cache_stats()
    assert after == before, "a new length compiled a new kernel"


def test_many_lengths_stay_correct():
    # More problems than the library keeps (256): the least recently used
    # are forgotten and rebuilt when they come back, with no new compile.
    for n in range(1, 300):
        kiln.attention(*make(1, 1, n, n, 64, torch.bfloat16, "bhsd", n))
    _, before = kiln.cache_stats()
    q, k, v = make(1, 2, 5, 5, 64, torch.bfloat16, "bhsd", 5)
    o = kiln.attention(q, k, v, causal=True)
    o_ref, _ = reference(q, k, v, True, "bhsd", torch.zeros_like(q))
    assert rel(o, o_ref) < 1e-2
    assert kiln.cache_stats()[1] == before


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="SKIPPED: one GPU")
@pytest.mark.parametrize("B,H,Nq,Nk,D,causal", [
    (1, 2, 1000, 1000, 64, True),
    (2, 3, 2049, 2049, 128, False),
    (4, 16, 1, 8192, 128, False),  # decoding: split keys, their workspace
])
def test_second_device(B, H, Nq, Nk, D, causal):
    # Device 1 runs what device 0 runs, bit for bit (the backward in torch's
    # deterministic mode), with the current device left at 0, and matches
    # float64 math there.
    q, k, v = make(B, H, Nq, Nk, D, torch.bfloat16, "bhsd", seed=19 + Nq)
    grad_o = torch.randn_like(q)
    on1 = [t.to("cuda:1").requires_grad_() for t in (q, k, v, grad_o)]
    on0 = [t.requires_grad_() for t in (q, k, v)]
    results = []
    for (q_, k_, v_), g in ((on0, grad_o), (on1[:3], on1[3])):
        with torch.cuda.device(0):  # for device 1: not the tensors' device
            poison_allocator(device=q_.device)
            o = kiln.attention(q_, k_, v_, causal=causal)
            with deterministic():
                grads = torch.autograd.grad(o, (q_, k_, v_), g)
        results.append([o, *grads])
    torch.cuda.synchronize(1)
    for name, a, b in zip(("o", "dq", "dk", "dv"), *results):
        assert b.device == torch.device("cuda:1"), name
        assert torch.equal(a, b.to("cuda:0")), name
    o_ref, grads_ref = reference(*on1[:3], causal, "bhsd", on1[3])
    for name, got, want in zip(("o", "dq", "dk", "dv"), results[1],
                               [o_ref, *grads_ref]):
        assert rel(got, want) < (1e-2 if name == "o" else 2e-2), name
    with pytest.raises(ValueError, match="one device"):
        kiln.attention(q, on1[1], on1[2])


def test_eager_path_matches_the_op():
    # Without gradients to record kiln.attention skips the dispatcher; the
    # same kernels run either way.
    q, k, v = make(2, 4, 1000, 1000, 128, torch.bfloat16, "bshd", seed=23)
    with torch.inference_mode():
        fast = kiln.attention(q, k, v, causal=True, layout="bshd")
    via_op, _ = torch.ops.kiln.attention_forward(q, k, v, True, 1 / math.sqrt(128), True)
    assert torch.equal(fast, via_op)


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


def rope_tables(P, D):
    inv = 10000.0 ** (-torch.arange(0, D, 2, device=DEV, dtype=torch.float64) / D)
    ang = torch.arange(P, device=DEV, dtype=torch.float64)[:, None] * inv
    return ang.cos().float().contiguous(), ang.sin().float().contiguous()


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


@pytest.mark.parametrize("activation, m, k, n, layout", [
    ("none", 300, 768, 1024, "nk"), ("none", 300, 768, 1024, "kn"),
    ("relu", 300, 768, 1024, "nk"), ("gelu", 300, 768, 1024, "nk"),
    ("gelu", 300, 768, 1024, "kn"), ("gelu", 257, 77, 1001, "nk"),
    ("relu", 257, 77, 1001, "kn")])
def test_linear_gradients_match_float64(activation, m, k, n, layout):
    # dX, dW (as the weight is stored: nn.Linear's (N, K) or (K, N)) and db
    # through autograd, against float64 on the same bf16 values; ragged N
    # and K take the padded rows.
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


@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_linear_gradient_runs_from_cpp_as_python_does(activation, layout):
    # With a gradient, the common case is a C++ autograd Function
    # (csrc/linear.cpp) of the Python Function's kernels and formulas: the
    # same bits for Y, dX, dW and db, an expanded dY (from .sum()) too.
    from kiln import _cpp, fused
    assert _cpp.module() is not None, "the C++ extension did not build"
    torch.manual_seed(14)
    x = torch.randn(264, 768, device=DEV).bfloat16().requires_grad_()
    shape = (1024, 768) if layout == "nk" else (768, 1024)
    w = (torch.randn(shape, device=DEV) / 30).bfloat16().requires_grad_()
    b = torch.randn(1024, device=DEV).bfloat16().requires_grad_()
    g = torch.randn(264, 1024, device=DEV).bfloat16()
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
    # A contiguous bf16 x with contiguous parameters is checked and launched
    # in C++ (csrc/ops.cpp); anything else returns None there and the Python
    # path checks it (and names the problem). The same kernel: the same bits.
    from kiln import _cpp, norms
    cpp = _cpp.module()
    assert cpp is not None, "the C++ extension did not build"
    torch.manual_seed(15)
    x = torch.randn(4, 33, 768, device=DEV).bfloat16()
    w = torch.randn(768, device=DEV).bfloat16()
    b = torch.randn(768, device=DEV).bfloat16()
    rms, ln = cpp.row_norm(0, x, w, None, 1e-6), cpp.row_norm(1, x, w, b, 1e-5)
    assert rms is not None and ln is not None and rms.shape == x.shape
    assert cpp.row_norm(0, x.transpose(0, 1), w, None, 1e-6) is None
    assert cpp.row_norm(0, x.float(), w, None, 1e-6) is None
    assert cpp.row_norm(0, x, w[:-8], None, 1e-6) is None
    assert cpp.row_norm(1, x, w, None, 1e-5) is None
    assert cpp.row_norm(0, x, w, None, float("nan")) is None
    with pytest.raises(ValueError, match="eps"):
        kiln.rms_norm(x, w, float("nan"))
    monkeypatch.setattr(norms._cpp, "module", lambda: None)
    assert torch.equal(rms, kiln.rms_norm(x, w))
    assert torch.equal(ln, kiln.layer_norm(x, w, b))


def test_attention_common_case_checked_in_cpp(monkeypatch):
    # kiln.attention's common case is checked and launched in C++
    # (attentionChecked); anything else returns None there, and the Python
    # path names the problem or copies a misaligned K / V, as before. The
    # same kernels: the same bits, with and without a gradient.
    from kiln import _cpp, ops
    cpp = _cpp.module()
    assert cpp is not None, "the C++ extension did not build"
    q, k, v = make(2, 4, 1, 1000, 128, torch.bfloat16, "bshd", seed=31)
    o, lse = cpp.attention_checked(q, k, v, True, None, True)
    assert o.shape == q.shape and lse.shape == (2, 4, 1)
    b = [t.transpose(1, 2) for t in (q, k, v)]  # the same tensors as bhsd
    assert torch.equal(cpp.attention_checked(*b, True, 0.125, False)[0]
                       .transpose(1, 2),
                       cpp.attention_checked(q, k, v, True, 0.125, True)[0])
    odd = torch.randn(2 * 1000 * 4 * 128 + 1, device=DEV).bfloat16()[1:]
    k_odd = odd.view(2, 1000, 4, 128)
    assert cpp.attention_checked(q, k_odd, v, True, None, True) is None
    assert cpp.attention_checked(q.float(), k.float(), v.float(), True, None,
                                 True) is None
    assert cpp.attention_checked(q[..., :96], k[..., :96], v[..., :96], True,
                                 None, True) is None
    assert cpp.attention_checked(q, k[:1], v[:1], True, None, True) is None
    assert cpp.attention_checked(q, k, v, True, float("nan"), True) is None
    with pytest.raises(ValueError, match="head_dim 96"):
        kiln.attention(q[..., :96].contiguous(), k[..., :96].contiguous(),
                       v[..., :96].contiguous(), layout="bshd")
    with pytest.raises(ValueError, match="scale"):
        kiln.attention(q, k, v, scale=float("nan"), layout="bshd")
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    grad_o = torch.randn_like(q)
    with deterministic():  # dQ without atomics: comparable bit for bit
        fast = kiln.attention(qg, kg, vg, causal=True, layout="bshd",
                              return_lse=True)
        assert "CppNode" in fast[0].grad_fn.name()
        grads = torch.autograd.grad(fast[0], (qg, kg, vg), grad_o)
        monkeypatch.setattr(ops._cpp, "module", lambda: None)
        slow = kiln.attention(qg, kg, vg, causal=True, layout="bshd",
                              return_lse=True)
        assert "CppNode" not in slow[0].grad_fn.name()
        assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])
        for got, want in zip(grads, torch.autograd.grad(slow[0], (qg, kg, vg),
                                                         grad_o)):
            assert torch.isfinite(got).all() and torch.equal(got, want)
    k_odd.copy_(k)  # misaligned: the Python path copies it, same bits
    assert torch.equal(kiln.attention(q, k_odd, v, causal=True, layout="bshd"),
                       fast[0])


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

    poison_allocator()
    fast = run()
    assert all("CppNode" in n for n in fast[3::4]), fast[3::4]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fused._cpp, "module", lambda: None)
        slow = run()
    assert not any("CppNode" in n for n in slow[3::4]), slow[3::4]
    for a, b in zip(fast, slow):
        if isinstance(a, torch.Tensor):
            assert torch.isfinite(a).all() and torch.equal(a, b)
    assert cpp.rotary(x.float(), cos, sin, None, bshd) is None
    assert cpp.rotary(x[..., :48], cos[:, :24].contiguous(),
                      sin[:, :24].contiguous(), None, bshd) is None
    assert cpp.rotary(x, cos.double(), sin.double(), None, bshd) is None
    assert cpp.rotary(x, cos, sin[:100], None, bshd) is None
    assert cpp.rotary(x, cos, sin, pos[:299], bshd) is None
    with pytest.raises(ValueError, match="power of two"):
        kiln.rotary(x[..., :48], cos[:, :24].contiguous(),
                    sin[:, :24].contiguous(), layout=layout)


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
