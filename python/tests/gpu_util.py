"""What the GPU test modules share: the device, outputs poisoned through
torch's caching allocator, relative errors, deterministic algorithms, the
C++ and Python paths compared."""
import contextlib

import pytest
import torch

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
