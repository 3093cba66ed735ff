#!/usr/bin/env python3
"""Writes a synthetic many-rank job as one PyTorch-profiler (Kineto) trace per rank, for `fleet_bench.py`.

The job is a tensor-parallel decoder: ranks in groups of `--tp` (8 GPUs per node, one process group each), every
step `--layers` layers of GEMM, attention and an all-reduce within the group, and a data-parallel all-reduce over
all ranks at the end of the step. Compute times jitter per rank (seeded, so the files are the same every time) and
one rank in 32 is a straggler (its compute 15 % slower): its group waits for it at every all-reduce, as a late rank
makes its peers wait on real hardware. A collective ends for everyone `transfer` after its last rank arrives.

Each rank file has what the Kineto reader needs: `distributedInfo` (rank, world size), its node's `host_name` (8
GPUs per node, so that clocks are aligned across hosts as for a real multi-node job), `baseTimeNanoseconds`, a
`ProfilerStep#N` range per step, a `cudaLaunchKernel` call per kernel linked by its correlation id, and on NCCL
kernels the collective's name, message size and process group, as PyTorch writes them.

    python3 bench/scripts/make_fleet_job.py --ranks 32 --steps 20 --layers 32 --out /tmp/fleet32
"""

import argparse
import gzip
import json
import multiprocessing
import os

import numpy as np

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
ATTENTION = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false>, true>"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
BASE_NS = 1_790_000_000_000_000_000


def simulate(ranks, steps, layers, tp, seed):
    """Per rank, the kernels in order: (name, start_ns, end_ns, group or None, message elements)."""
    rng = np.random.default_rng(seed)
    slow = np.ones(ranks)
    slow[::32] = 1.15
    clock = np.full(ranks, 1_000_000.0)
    groups = np.arange(ranks) // tp
    kernels = [[] for _ in range(ranks)]
    step_ranges = [[] for _ in range(ranks)]

    def collective(members_of, name_of, elements, transfer_ns):
        arrive = clock.copy()
        latest = np.zeros(ranks)
        for g in np.unique(members_of):
            members = members_of == g
            latest[members] = arrive[members].max()
        end = latest + transfer_ns
        for r in range(ranks):
            kernels[r].append((ALLREDUCE, int(arrive[r]), int(end[r]), name_of(r), elements))
        clock[:] = end

    for _ in range(steps):
        step_start = clock.copy()
        for _ in range(layers):
            for name, mean_ns in ((GEMM, 180_000.0), (ATTENTION, 90_000.0)):
                duration = mean_ns * slow * rng.normal(1.0, 0.03, ranks).clip(0.8, 1.2)
                start = clock + 2_000
                for r in range(ranks):
                    kernels[r].append((name, int(start[r]), int(start[r] + duration[r]), None, 0))
                clock[:] = start + duration
            collective(groups, lambda r: f"tp{r // tp}", 4096 * 256, 40_000.0)
        # The data-parallel gradient all-reduce over every rank.
        collective(np.zeros(ranks, dtype=int), lambda r: "dp", 1 << 24, 900_000.0)
        for r in range(ranks):
            step_ranges[r].append((int(step_start[r]), int(clock[r])))
    return kernels, step_ranges


def rank_trace(rank, ranks, tp, kernels, step_ranges):
    pid = 10_000 + rank
    device = rank % 8
    events = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "python3"}}]
    for step, (start, end) in enumerate(step_ranges):
        events.append({"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{step}", "pid": pid, "tid": pid,
                       "ts": start / 1000 - 5, "dur": (end - start) / 1000, "args": {"External id": step + 1}})
    for correlation, (name, start, end, group, elements) in enumerate(kernels, start=1):
        launch_us = start / 1000 - 3
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": pid,
                       "ts": launch_us, "dur": 2.5, "args": {"correlation": correlation}})
        args = {"device": device, "stream": 7, "correlation": correlation, "grid": [132, 1, 1], "block": [256, 1, 1]}
        if group is not None:
            members = list(range(ranks)) if group == "dp" else list(range(rank - rank % tp, rank - rank % tp + tp))
            args.update({"Collective name": "allreduce", "In msg nelems": elements, "Out msg nelems": elements,
                         "Group size": len(members), "dtype": "BFloat16", "Process Group Name": group,
                         "Process Group Ranks": json.dumps(members)})
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": 7, "ts": start / 1000,
                       "dur": (end - start) / 1000, "args": args})
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": d, "name": "NVIDIA H200", "totalGlobalMem": 150109880320, "numSms": 132}
                             for d in range(8)],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": ranks},
        # Eight GPUs per node: the ranks ran on several hosts, so the analyzer aligns their clocks.
        "host_name": f"node{rank // 8:03d}",
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": events,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--tp", type=int, default=8, help="ranks per tensor-parallel group")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True, help="folder for rankNNNN.json.gz")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes writing the files")
    args = parser.parse_args()
    if args.ranks % args.tp:
        parser.error("--ranks must be a multiple of --tp")
    kernels, step_ranges = simulate(args.ranks, args.steps, args.layers, args.tp, args.seed)
    os.makedirs(args.out, exist_ok=True)
    # The files are written by `--jobs` processes forked after the simulation, each reading the kernels it inherited.
    global _JOB
    _JOB = (args, kernels, step_ranges)
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            totals = pool.map(_write_rank, range(args.ranks), chunksize=1)
    else:
        totals = [_write_rank(rank) for rank in range(args.ranks)]
    print(f"{args.ranks} ranks, {sum(totals)} kernels in {args.out}")


_JOB = None


def _write_rank(rank):
    args, kernels, step_ranges = _JOB
    path = os.path.join(args.out, f"rank{rank:04d}.json.gz")
    with gzip.open(path, "wt", compresslevel=1) as f:
        json.dump(rank_trace(rank, args.ranks, args.tp, kernels[rank], step_ranges[rank]), f)
    return len(kernels[rank])


if __name__ == "__main__":
    main()
