# Host time a call (a loop that does not wait) and time a call back to back (CUDA events, kiln
# and torch in turn: bench_interleaved_ms) of the row norms' forward + backward and
# cross-entropy's forward and forward + backward, kiln beside torch, same tensors.
import sys, time, torch, kiln
import torch.nn.functional as F
from kiln.bench import bench_interleaved_ms
torch.manual_seed(0)
print(torch.cuda.get_device_name())


def host_us(fn, n=50):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    h = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return h


def row(label, fk, ft):
    r = bench_interleaved_ms({"k": fk, "t": ft}, reps=20)
    print(f"{label}: host kiln {host_us(fk):.1f} torch {host_us(ft):.1f} us; back to back "
          f"kiln {r['k']*1e3:.1f} torch {r['t']*1e3:.1f} us, torch/kiln {r['t']/r['k']:.3f}",
          flush=True)


if "norms" in sys.argv[1:] or len(sys.argv) == 1:
    for rows, cols in ((16, 4096), (8192, 768), (8192, 4096), (16384, 4096), (8192, 5120),
                       (4096, 3000)):
        x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        b = torch.randn(cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
        row(f"rms fwd+bwd {rows}x{cols}",
            lambda: torch.autograd.grad(kiln.rms_norm(x, w), (x, w), g),
            lambda: torch.autograd.grad(F.rms_norm(x, (cols,), w, 1e-6), (x, w), g))
        row(f"layer fwd+bwd {rows}x{cols}",
            lambda: torch.autograd.grad(kiln.layer_norm(x, w, b), (x, w, b), g),
            lambda: torch.autograd.grad(F.layer_norm(x, (cols,), w, b, 1e-5), (x, w, b), g))
if "ce" in sys.argv[1:] or len(sys.argv) == 1:
    for rows, vocab in ((16, 128256), (4096, 32000), (8192, 50257), (8192, 128256)):
        x = (2 * torch.randn(rows, vocab, device="cuda")).bfloat16().requires_grad_()
        y = torch.randint(0, vocab, (rows,), device="cuda")
        row(f"ce fwd {rows}x{vocab}", lambda: kiln.cross_entropy(x.detach(), y),
            lambda: F.cross_entropy(x.detach(), y))
        row(f"ce fwd+bwd {rows}x{vocab}",
            lambda: torch.autograd.grad(kiln.cross_entropy(x, y), x),
            lambda: torch.autograd.grad(F.cross_entropy(x, y), x))
