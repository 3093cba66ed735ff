"""Two one-GPU PyTorch programs under torch.profiler (profile_memory=True), each made with one cause that
`analyzer findings` must name (traces in sample-traces/findings/):

    python3 kineto_causes.py pageable OUT.json   # every step copies 64 MiB from pageable host memory to the GPU
    python3 kineto_causes.py full OUT.json       # the steps run with ~93 % of the GPU's memory held by the allocator

Writes OUT.json.gz and prints torch's max_memory_reserved() and the GPU's total memory.
"""
import gzip, os, shutil, sys, torch
from torch.profiler import profile, ProfilerActivity, schedule

mode, out = sys.argv[1], sys.argv[2]
dev = torch.device("cuda")
a = torch.randn(4096, 4096, device=dev)
b = torch.randn(4096, 4096, device=dev)
hold = None
if mode == "full":
    free, total = torch.cuda.mem_get_info()
    hold = torch.empty(int(total * 0.93) - (total - free), dtype=torch.uint8, device=dev)
host = torch.randn(16 * 1024 * 1024)  # 64 MiB, pageable
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True,
             schedule=schedule(wait=1, warmup=1, active=8)) as prof:
    for _ in range(10):
        if mode == "pageable":
            c = host.to(dev)
            a.add_(c.view(4096, 4096) * 1e-6)
        for _ in range(4):
            a = torch.tanh(a @ b * 1e-3)
        torch.cuda.synchronize()
        prof.step()
prof.export_chrome_trace(out)
with open(out, "rb") as f, gzip.open(out + ".gz", "wb") as g:
    shutil.copyfileobj(f, g)
os.remove(out)
print(mode, "max_reserved", torch.cuda.max_memory_reserved(), "total", torch.cuda.get_device_properties(0).total_memory)
