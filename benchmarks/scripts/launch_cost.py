#!/usr/bin/env python3
"""Host time per kernel launch under each recorder, on one GPU: what a recorder adds to a launch-bound run.

A tensor-parallel decode is as fast as its slowest rank's launching thread, and a two-GPU run is too noisy
(±25 % between identical runs) to resolve a few percent of recorder cost. One GPU launching short kernels is
steady, so this measures the added host time per launch directly: `workloads/launch_cost.cu` (bare
`cudaLaunchKernel` of an empty kernel) and `workloads/torch_launch_cost.py` (an in-place add through PyTorch,
the launch path of a real decode), both timing only the issuing of batches that never fill the launch queue.
Each round runs every mode once, the order rotated by one each round; every sample goes to the results file.

    python3 benchmarks/scripts/launch_cost.py --capture target/release/capture --nsys nsys --rounds 5 --out launch.json

Modes: uncaptured; capture (defaults); capture-kernel (kernels only, no NCCL plugin: what CUPTI's kernel timing
alone costs); nsys (`nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none`).
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The recorders' command lines and the round-keeping are those of the two-GPU benchmark, so both measure the same
# recorders the same way.
from capture_overhead import keep_sample, mode_command, rotated  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "..", "..", "workloads")
MODES = ["uncaptured", "capture", "capture-kernel", "nsys"]
LINE = re.compile(r"launch_ns median ([0-9.]+) p10 ([0-9.]+) p90 ([0-9.]+) launches (\d+)")


def run_once(args, program, mode, scratch):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0", PYTHONUNBUFFERED="1")
    done = subprocess.run(mode_command(args, mode, program["command"], scratch), env=env, capture_output=True, text=True,
                          timeout=args.timeout_s)
    found = LINE.search(done.stdout)
    sample = {"program": program["name"], "mode": mode, "exit_code": done.returncode}
    if found:
        sample.update({"median_ns": float(found[1]), "p10_ns": float(found[2]), "p90_ns": float(found[3]),
                       "launches": int(found[4])})
    else:
        sample["stderr_tail"] = done.stderr[-2000:]
    if mode.startswith("capture"):
        sample["capture_summary"] = [line for line in done.stderr.splitlines() if line.startswith("capture:")]
    return sample


def summarise(samples):
    summary = {}
    for program in sorted({s["program"] for s in samples}):
        rows = {}
        base = [s["median_ns"] for s in samples if s["program"] == program and s["mode"] == "uncaptured"
                and "median_ns" in s]
        base_ns = statistics.median(base) if base else None
        for mode in MODES:
            values = [s["median_ns"] for s in samples if s["program"] == program and s["mode"] == mode
                      and "median_ns" in s]
            if not values:
                continue
            median = statistics.median(values)
            rows[mode] = {"n": len(values), "median_ns": round(median, 1), "min_ns": round(min(values), 1),
                          "max_ns": round(max(values), 1),
                          "added_ns": round(median - base_ns, 1) if base_ns is not None else None}
        summary[program] = rows
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capture", default="capture", help="the capture binary")
    parser.add_argument("--nsys", default="nsys", help="the Nsight Systems CLI")
    parser.add_argument("--nvcc", default="nvcc")
    parser.add_argument("--mode", action="append", choices=MODES, help="repeatable; default all")
    parser.add_argument("--program", action="append", choices=["cuda", "torch"], help="repeatable; default both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scratch", default="/tmp/launch-cost")
    parser.add_argument("--timeout-s", type=float, default=120)
    parser.add_argument("--out", required=True, help="results JSON (every sample and the summary)")
    args = parser.parse_args()
    modes = args.mode or MODES
    os.makedirs(args.scratch, exist_ok=True)
    programs = []
    if "cuda" in (args.program or ["cuda", "torch"]):
        binary = os.path.join(args.scratch, "launch_cost")
        subprocess.run([args.nvcc, "-O2", "-o", binary, os.path.join(WORKLOADS, "launch_cost.cu")], check=True)
        programs.append({"name": "cuda", "command": [binary, "2000", "100"]})
    if "torch" in (args.program or ["cuda", "torch"]):
        programs.append({"name": "torch",
                         "command": ["python3", os.path.join(WORKLOADS, "torch_launch_cost.py"), "400", "100"]})
    gpu = subprocess.run(["nvidia-smi", "--id=0", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    results = {"command": sys.argv, "gpu": gpu, "rounds": args.rounds, "modes": modes, "samples": []}
    for r in range(args.rounds):
        for program in programs:
            for position, mode in enumerate(rotated(modes, r)):
                sample = run_once(args, program, mode, args.scratch)
                sample.update({"round": r, "position": position})
                print(f"round {r} {program['name']} {mode}: {sample.get('median_ns')} ns/launch "
                      f"(exit {sample['exit_code']})", flush=True)
                keep_sample(results, sample, summarise, args.out)
    shutil.rmtree(args.scratch, ignore_errors=True)
    print(json.dumps(results.get("summary", {}), indent=1))


if __name__ == "__main__":
    main()
