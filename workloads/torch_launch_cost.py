#!/usr/bin/env python3
"""Host time per operator launch through PyTorch: the launch path of a real decode step (the dispatcher, the
caching allocator's checks, about fifteen runtime and driver calls per kernel) rather than a bare launch.

Runs batches of in-place adds on a tiny tensor, small enough never to fill the launch queue, times only the issuing
of each batch, synchronises between batches, and prints the median, 10th and 90th percentile ns per operator.

    python3 workloads/torch_launch_cost.py 400 100

With `--windows PAIRS` it measures instead what recording adds inside one process, for a capture made with
`--cuda-profiler-api`: PAIRS pairs of blocks of BATCHES batches, one block inside a `cudaProfilerStart`/`Stop`
window (recording on) and one outside (off), the order alternating between pairs so both halves share the
process, its clocks and its neighbours. The first batch after each switch is not timed (the switch itself is not
a launch). Prints the median, 10th and 90th percentile of the per-pair ratio (median ns per operator on ÷ off)
as one JSON line. Two captures that differ in one recorded kind (`--trace all` against `--trace all,memory`)
then give that kind's cost as the ratio of their ratios, without comparing two processes' speeds.

    capture --cuda-profiler-api --trace all,memory -o m.sqlite -- python3 workloads/torch_launch_cost.py 20 100 --windows 40

With LAUNCH_COST_TURNS=IN,OUT,READY (three FIFO paths) two processes on one CPU take turns batch by batch, as
`launch_cost.cu` does (see there): a byte on READY after the warm-up, then each batch waits for a byte on IN and
passes it to OUT once the GPU has drained.
"""

import argparse
import json
import os
import statistics
import time

import torch


def issue_ns(x, per_batch):
    """Host ns per operator to issue one batch (the GPU not waited for)."""
    started = time.perf_counter_ns()
    for _ in range(per_batch):
        x.add_(1.0)
    return (time.perf_counter_ns() - started) / per_batch


def batch_ns(x, per_batch):
    """`issue_ns`, then the GPU drained, so that the next batch starts on an empty queue."""
    ns = issue_ns(x, per_batch)
    torch.cuda.synchronize()
    return ns


def at(values, q):
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


class Turns:
    """The FIFOs of LAUNCH_COST_TURNS, opened read-write so that opening never waits for the other side."""

    def __init__(self, spec):
        paths = spec.split(",")
        if len(paths) != 3:
            raise SystemExit("torch_launch_cost: LAUNCH_COST_TURNS: three FIFO paths IN,OUT,READY")
        self.take, self.give, self.ready = (os.open(p, os.O_RDWR) for p in paths)

    def wait(self):
        if os.read(self.take, 1) != b"t":
            raise SystemExit("torch_launch_cost: the turn FIFO closed")

    @staticmethod
    def put(fd):
        os.write(fd, b"t")


def launches(x, batches, per_batch):
    spec = os.environ.get("LAUNCH_COST_TURNS")
    turns = Turns(spec) if spec else None
    if turns:
        Turns.put(turns.ready)
    ns = []
    for _ in range(batches):
        if turns:
            turns.wait()
        torch.cuda.nvtx.range_push("batch")
        ns.append(issue_ns(x, per_batch))
        torch.cuda.nvtx.range_pop()  # the range holds the launches, not the wait after them
        torch.cuda.synchronize()
        if turns:
            Turns.put(turns.give)
    print(f"launch_ns median {at(ns, 0.5):.1f} p10 {at(ns, 0.1):.1f} p90 {at(ns, 0.9):.1f} "
          f"launches {batches * per_batch}")


def block(x, batches, per_batch, recording):
    """One block's median ns per operator, recording on (inside a profiler window) or off."""
    if recording:
        torch.cuda.profiler.start()
    batch_ns(x, per_batch)  # not timed: the first batch after the switch
    ns = [batch_ns(x, per_batch) for _ in range(batches)]
    if recording:
        torch.cuda.profiler.stop()
    return statistics.median(ns)


def windows(x, pairs, batches, per_batch):
    ratios, on_ns, off_ns = [], [], []
    for pair in range(pairs):
        order = (True, False) if pair % 2 == 0 else (False, True)
        medians = {recording: block(x, batches, per_batch, recording) for recording in order}
        on_ns.append(medians[True])
        off_ns.append(medians[False])
        ratios.append(medians[True] / medians[False])
    print(json.dumps({
        "pairs": pairs, "batches_per_block": batches, "per_batch": per_batch,
        "ratio_on_off": {"median": statistics.median(ratios), "p10": at(ratios, 0.1), "p90": at(ratios, 0.9)},
        "on_ns": statistics.median(on_ns), "off_ns": statistics.median(off_ns),
    }))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("batches", type=int, nargs="?", default=400)
    parser.add_argument("per_batch", type=int, nargs="?", default=100)
    parser.add_argument("--windows", type=int, metavar="PAIRS", help="pairs of blocks on/off inside one process")
    args = parser.parse_args()
    x = torch.zeros(16, device="cuda")
    for _ in range(5 * args.per_batch):
        x.add_(1.0)
    torch.cuda.synchronize()
    if args.windows:
        windows(x, args.windows, args.batches, args.per_batch)
    else:
        launches(x, args.batches, args.per_batch)


main()
