"""kiln.attention (and kiln.attention_qkvpacked) on the GPU against torch's
math attention in float64: outputs and gradients, both layouts, ragged and
unequal lengths; the custom
ops under torch.library.opcheck and torch.compile, inside a captured CUDA
graph, on a non-default stream; bitwise-repeatable gradients under
torch.use_deterministic_algorithms. Outputs are
written into memory the caching allocator has just had filled with NaN.
Skipped, loudly, without a GPU."""
import math

import pytest
import torch
import torch.nn.functional as F

import kiln

if not torch.cuda.is_available():
    pytest.skip("SKIPPED: no CUDA GPU: the GPU tests of kiln.attention need one",
                allow_module_level=True)

from gpu_util import DEV, deterministic, poison_allocator, rel  # noqa: E402


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
