# Row norms forward + backward against torch's autograd, one process, same tensors, in turn.
import torch, kiln
import torch.nn.functional as F
from kiln.bench import bench_interleaved_ms
torch.manual_seed(0)
print(torch.cuda.get_device_name())
print("kind,rows,cols,kiln_us,torch_us,torch/kiln")
for rows, cols in ((8192, 768), (8192, 4096), (16384, 4096), (8192, 5120), (4096, 3000)):
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    for kind in ("rms", "layer"):
        if kind == "rms":
            fk = lambda: torch.autograd.grad(kiln.rms_norm(x, w), (x, w), g)
            ft = lambda: torch.autograd.grad(F.rms_norm(x, (cols,), w, 1e-6), (x, w), g)
        else:
            fk = lambda: torch.autograd.grad(kiln.layer_norm(x, w, b), (x, w, b), g)
            ft = lambda: torch.autograd.grad(F.layer_norm(x, (cols,), w, b, 1e-5), (x, w, b), g)
        r = bench_interleaved_ms({"k": fk, "t": ft}, reps=20)
        print(f"{kind},{rows},{cols},{r['k']*1e3:.1f},{r['t']*1e3:.1f},{r['t']/r['k']:.3f}")
