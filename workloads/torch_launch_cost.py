#!/usr/bin/env python3
"""Host time per operator launch through PyTorch: the launch path of a real decode step (the dispatcher, the
caching allocator's checks, about fifteen runtime and driver calls per kernel) rather than a bare launch.

Runs batches of in-place adds on a tiny tensor, small enough never to fill the launch queue, times only the issuing
of each batch, synchronises between batches, and prints the median, 10th and 90th percentile ns per operator.

    python3 workloads/torch_launch_cost.py 400 100
"""

import sys
import time

import torch


def main():
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    per_batch = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    x = torch.zeros(16, device="cuda")
    for _ in range(5 * per_batch):
        x.add_(1.0)
    torch.cuda.synchronize()
    ns = []
    for _ in range(batches):
        torch.cuda.nvtx.range_push("batch")
        started = time.perf_counter_ns()
        for _ in range(per_batch):
            x.add_(1.0)
        issued = time.perf_counter_ns()
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        ns.append((issued - started) / per_batch)
    ns.sort()
    at = lambda q: ns[int(q * (len(ns) - 1))]  # noqa: E731
    print(f"launch_ns median {at(0.5):.1f} p10 {at(0.1):.1f} p90 {at(0.9):.1f} launches {batches * per_batch}")


main()
