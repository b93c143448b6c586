"""How kiln.attention is reached, on the GPU: the custom ops under
torch.library.opcheck and torch.compile (compiled autograd too), inside a
captured CUDA graph, on a non-default stream; bitwise-repeatable gradients
under torch.use_deterministic_algorithms; the C++ and Python autograd paths
bit for bit; the backward's launches (test_op_gpu.py: the numerics).
Skipped, loudly, without a GPU."""
import math

import pytest
import torch

import kiln

if not torch.cuda.is_available():
    pytest.skip("SKIPPED: no CUDA GPU: the GPU tests of kiln.attention need one",
                allow_module_level=True)

from gpu_util import (DEV, attention_inputs,  # noqa: E402
                      attention_reference, check_graph_replay, deterministic,
                      poison_allocator, profiled_kernels, rel)


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


def test_opcheck():
    q, k, v = attention_inputs(1, 2, 300, 300, 64, torch.bfloat16, "bhsd", seed=5)
    torch.library.opcheck(torch.ops.kiln.attention_forward.default, (q, k, v, True, 0.125, False))
    o, lse = torch.ops.kiln.attention_forward(q, k, v, True, 0.125, False)
    torch.library.opcheck(torch.ops.kiln.attention_backward.default,
                          (torch.randn_like(o), q, k, v, o, lse, True, 0.125, False))


def test_torch_compile_matches_eager():
    q, k, v = attention_inputs(2, 4, 1000, 1000, 64, torch.bfloat16, "bshd", seed=9)
    for t in (q, k, v):
        t.requires_grad_()
    f = lambda q, k, v: kiln.attention(q, k, v, causal=True, layout="bshd").float().square().sum()
    compiled = torch.compile(f, fullgraph=True)
    eager_grads = torch.autograd.grad(f(q, k, v), (q, k, v))
    compiled_grads = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    for a, b in zip(eager_grads, compiled_grads):
        assert torch.equal(a, b)


def test_cuda_graph_capture_and_replay():
    check_graph_replay(2, 4, 1000, 1000, 128, True, seed=11)


def test_runs_on_the_current_stream():
    q, k, v = attention_inputs(2, 4, 2048, 2048, 128, torch.bfloat16, "bhsd", seed=13)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        # Written on s just before: a launch on another stream could read
        # the old values.
        q2 = q * 2
        o = kiln.attention(q2, k, v)
    s.synchronize()
    o_ref, _ = attention_reference(q * 2, k, v, False, "bhsd", torch.zeros_like(q))
    assert rel(o, o_ref) < 1e-2


@pytest.mark.parametrize("D", [64, 128])
def test_gradients_are_bitwise_repeatable_when_asked(D):
    # D=64's default takes dQ by atomics; torch's deterministic mode asks
    # for the schedule without them.
    q, k, v = attention_inputs(2, 4, 1500, 1500, D, torch.bfloat16, "bhsd", seed=17)
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
                       attention_inputs(1, 2, 300, 300, 64, torch.bfloat16, "bhsd", 5))
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
        o = kiln.attention(*(t.requires_grad_() for t in attention_inputs(
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
    q, k, v = attention_inputs(2, 3, 333, 517, 64 if layout == "bhsd" else 128, dtype,
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
        inputs = attention_inputs(2, 4, 300, 300, 64, torch.bfloat16, "bhsd", 9)
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


def test_eager_path_matches_the_op():
    # Without gradients to record kiln.attention skips the dispatcher; the
    # same kernels run either way.
    q, k, v = attention_inputs(2, 4, 1000, 1000, 128, torch.bfloat16, "bshd", seed=23)
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
    q, k, v = attention_inputs(2, 4, 1, 1000, 128, torch.bfloat16, "bshd", seed=31)
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
