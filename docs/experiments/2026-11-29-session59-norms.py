# Norms against torch at power-of-two and other row lengths; same tensors, samples in turn.
import torch, kiln
from kiln.bench import bench_interleaved_ms
torch.manual_seed(0)
print(torch.cuda.get_device_name())
print("kind,rows,cols,dtype,kiln_us,torch_us,torch/kiln,max_err")
for dtype in (torch.bfloat16,):
    for rows, cols in ((8192, 768), (8192, 1024), (8192, 4096), (8192, 5120), (4096, 3000), (16, 4096), (16, 5120)):
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        w = torch.randn(cols, device="cuda", dtype=dtype)
        b = torch.randn(cols, device="cuda", dtype=dtype)
        for kind in ("rms", "layer"):
            if kind == "rms":
                fk = lambda: kiln.rms_norm(x, w, 1e-6)
                ft = lambda: torch.nn.functional.rms_norm(x, (cols,), w, 1e-6)
            else:
                fk = lambda: kiln.layer_norm(x, w, b, 1e-5)
                ft = lambda: torch.nn.functional.layer_norm(x, (cols,), w, b, 1e-5)
            err = (fk().float() - ft().float()).abs().max().item()
            r = bench_interleaved_ms({"k": fk, "t": ft}, reps=30); mk, mt = r["k"], r["t"]
            print(f"{kind},{rows},{cols},bf16,{mk*1e3:.1f},{mt*1e3:.1f},{mt/mk:.3f},{err:.3g}")
