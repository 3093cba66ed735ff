#!/usr/bin/env python3
"""A training-like loop that calls `torch.cuda.profiler.start()` before step FIRST and `stop()` after step
LAST - 1, as vLLM's and SGLang's profiling switches do, and prints how many kernels it launched between the two
calls: three in-place elementwise operators per step (add, mul, clamp), one kernel each.

    python3 workloads/torch_profiler_window.py STEPS FIRST LAST
"""

import sys

import torch

OPS_PER_STEP = 3


def step(x):
    x.add_(1.0)
    x.mul_(0.5)
    x.clamp_(min=0.0)


def main():
    steps, first, last = (int(a) for a in sys.argv[1:4])
    x = torch.zeros(1024, device="cuda")
    between = 0
    for i in range(steps):
        if i == first:
            torch.cuda.profiler.start()
        step(x)
        if first <= i < last:
            between += OPS_PER_STEP
        if i == last - 1:
            torch.cuda.profiler.stop()
    torch.cuda.synchronize()
    print(f"launched_between {between}")


main()
