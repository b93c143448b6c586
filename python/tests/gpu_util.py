"""What the GPU test modules share: the device, outputs poisoned through
torch's caching allocator, relative errors, deterministic algorithms, the
C++ and Python paths compared, casts counted."""
import contextlib

import pytest
import torch
import torch.nn.functional as F

import kiln

DEV = torch.device("cuda")


def casts(run):
    """How many dtype casts (aten::_to_copy) `run` issues."""
    with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run()
    return sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")


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


def rel(a, b):
    """Relative error; against a reference that is all zeros (dQ and dK with
    one key), the error relative to 1."""
    a, b = a.double(), b.double()
    return ((a - b).norm() / max(b.norm().item(), 1.0)).item()


def assert_cpp_path_matches_python(run, module):
    """`run()` returns, per case, [output, output without a gradient,
    gradient, the output's grad_fn name]; run from C++ (C++ Functions) and
    with `module`'s extension off (the Python path), the tensors are the
    same bits."""
    poison_allocator()
    fast = run()
    assert all("CppNode" in n for n in fast[3::4]), fast[3::4]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module._cpp, "module", lambda: None)
        slow = run()
    assert not any("CppNode" in n for n in slow[3::4]), slow[3::4]
    for a, b in zip(fast, slow):
        if isinstance(a, torch.Tensor):
            assert torch.isfinite(a).all() and torch.equal(a, b)


def rope_tables(P, D):
    inv = 10000.0 ** (-torch.arange(0, D, 2, device=DEV, dtype=torch.float64) / D)
    ang = torch.arange(P, device=DEV, dtype=torch.float64)[:, None] * inv
    return ang.cos().float().contiguous(), ang.sin().float().contiguous()


# Attention's inputs, reference and checks, for test_op_gpu.py and
# test_op_paths_gpu.py.


def attention_inputs(B, H, Nq, Nk, D, dtype, layout, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    shape = (lambda n: (B, H, n, D)) if layout == "bhsd" else (lambda n: (B, n, H, D))
    return [torch.randn(shape(n), device=DEV, dtype=dtype, generator=g)
            for n in (Nq, Nk, Nk)]


def to_bhsd(t, layout):
    return t if layout == "bhsd" else t.transpose(1, 2)


def attention_reference(q, k, v, causal, layout, grad_o):
    """Output and gradients by torch's math attention in float64."""
    qd, kd, vd = (to_bhsd(t, layout).detach().double().requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal,
                                       enable_gqa=kd.shape[1] != qd.shape[1])
    o.backward(to_bhsd(grad_o, layout).double())
    back = lambda t: t if layout == "bhsd" else t.transpose(1, 2)
    return back(o.detach()), [back(t.grad) for t in (qd, kd, vd)]


def profiled_kernels(f):
    """Names of the CUDA kernels f() launches."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        f()
        torch.cuda.synchronize()
    return sorted(e.name for e in prof.events()
                  if e.device_type == torch.autograd.DeviceType.CUDA)


def check_graph_replay(B, H, Nq, Nk, D, causal, seed):
    """kiln.attention captured in a CUDA graph, replayed on new inputs copied
    in place, against the fp64 reference."""
    q, k, v = attention_inputs(B, H, Nq, Nk, D, torch.bfloat16, "bhsd", seed)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture (compile, load)
        kiln.attention(q, k, v, causal=causal)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        o = kiln.attention(q, k, v, causal=causal)
    for new_seed in (seed + 1, seed + 2):  # new inputs in place, then replay
        for t, n in zip((q, k, v), attention_inputs(B, H, Nq, Nk, D, torch.bfloat16, "bhsd", new_seed)):
            t.copy_(n)
        o.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        o_ref, _ = attention_reference(q, k, v, causal, "bhsd", torch.zeros_like(q))
        assert rel(o, o_ref) < 1e-2
