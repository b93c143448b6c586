"""What the GPU test modules share: the device, outputs poisoned through
torch's caching allocator, relative errors, deterministic algorithms."""
import contextlib

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
