#!/usr/bin/env python3
"""A small PyTorch program whose GPU memory goes up and down: weights loaded, activations of growing batches, a
release of the allocator's cache (`torch.cuda.empty_cache()`, so CUDA sees frees), then steps again. Each phase is an
NVTX range (`load`, `grow`, `trim`, `steady`); each step a `record_function` named `step<N>` for torch.profiler.

At the end it prints one JSON line with PyTorch's own numbers: `max_memory_reserved` (peak bytes the caching
allocator held from CUDA), `max_memory_allocated` (peak bytes in tensors), the allocator's count of `cudaMalloc`
segments made and freed, and `memory_allocated()` after every step (to check a profiler's `Total Allocated`).

    python3 workloads/memory_probe.py                      # plain
    TORCH_PROF=out.json python3 workloads/memory_probe.py  # under torch.profiler(profile_memory=True)
    MEMORY_PROBE_HIDDEN=12288 python3 workloads/memory_probe.py  # wider layers: about 9 GB reserved instead of 0.65

The width sets how much the caching allocator reserves against the fixed workspaces libraries allocate themselves
(cuBLAS' 64 MiB at its first matmul), which the allocator's own peak does not count.
"""

import json
import os

import torch

HIDDEN = int(os.environ.get("MEMORY_PROBE_HIDDEN", "2048"))
LAYERS = 6


def step(weights, batch, name, after):
    with torch.profiler.record_function(name):
        x = torch.randn(batch, HIDDEN, device="cuda", dtype=torch.float16)
        for w in weights:
            x = torch.relu(x @ w)
        scratch = torch.empty(batch * 4, HIDDEN, device="cuda", dtype=torch.float16)
        scratch.fill_(1.0)
        total = float((x.sum() + scratch[0, 0]).item())
        del x, scratch
    after.append({"step": name, "allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()})
    return total


def run():
    after = []
    torch.cuda.nvtx.range_push("load")
    weights = [torch.randn(HIDDEN, HIDDEN, device="cuda", dtype=torch.float16) for _ in range(LAYERS)]
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    n = 0
    torch.cuda.nvtx.range_push("grow")
    for batch in (256, 1024, 4096, 8192, 16384):
        step(weights, batch, f"step{n}", after)
        n += 1
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_push("trim")
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_push("steady")
    for _ in range(6):
        step(weights, 2048, f"step{n}", after)
        n += 1
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    del weights
    return after


def main():
    torch.cuda.init()
    prof_path = os.environ.get("TORCH_PROF")
    if prof_path:
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities, profile_memory=True, record_shapes=False) as prof:
            after = run()
        prof.export_chrome_trace(prof_path)
    else:
        after = run()
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    print(
        json.dumps(
            {
                "max_memory_reserved": torch.cuda.max_memory_reserved(),
                "max_memory_allocated": torch.cuda.max_memory_allocated(),
                "segments_allocated": stats.get("segment.all.allocated", 0),
                "segments_freed": stats.get("segment.all.freed", 0),
                "after_step": after,
            }
        ),
        flush=True,
    )


main()
