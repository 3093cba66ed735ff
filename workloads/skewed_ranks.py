#!/usr/bin/env python3
"""Runs a PyTorch workload with one rank deliberately late to some of its all-reduces.

Used to check that the analyzer blames the right rank: the late rank's collective kernels start late, so the
other ranks wait for it. The workload itself is not modified: `torch.distributed.all_reduce` is wrapped before
the workload's script runs.

    SKEW_RANK=1 SKEW_MS=2 SKEW_EVERY=4 python3 -m torch.distributed.run --nproc_per_node=2 \
        workloads/skewed_ranks.py path/to/tp_llm.py

SKEW_RANK: the rank that sleeps (default 1); SKEW_MS: how long, on the host, before the all-reduce is issued
(default 2); SKEW_EVERY: sleep before every N-th all-reduce (default 4). The rank first synchronises its own
GPU so the delay is not hidden by work already queued on it, then sleeps.
"""

import os
import runpy
import sys
import time

import torch
import torch.distributed as dist

SKEW_RANK = int(os.environ.get("SKEW_RANK", "1"))
SKEW_SECONDS = float(os.environ.get("SKEW_MS", "2")) / 1000.0
SKEW_EVERY = int(os.environ.get("SKEW_EVERY", "4"))
RANK = int(os.environ.get("RANK", "0"))

original_all_reduce = dist.all_reduce
calls = 0
skewed = 0


def late_all_reduce(*args, **kwargs):
    global calls, skewed
    calls += 1
    if RANK == SKEW_RANK and calls % SKEW_EVERY == 0:
        torch.cuda.synchronize()
        time.sleep(SKEW_SECONDS)
        skewed += 1
    return original_all_reduce(*args, **kwargs)


dist.all_reduce = late_all_reduce
script = sys.argv[1]
sys.argv = sys.argv[1:]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    print(f"rank {RANK} all_reduce calls {calls} delayed {skewed} by {SKEW_SECONDS * 1000:.1f} ms", flush=True)
