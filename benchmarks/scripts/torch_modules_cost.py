#!/usr/bin/env python3
"""What recording module ranges costs a decode step: `workloads/qwen3_decode.py` (eager decode of a random-weight
Qwen3) run under each mode, the modes interleaved and their order rotated by one every round, until the rounds or
the time budget run out. The figure is the workload's own decode step time (wall time of its timed loop, which
synchronises the GPU only before and after).

Modes:
  uncaptured        the workload alone
  capture           capture (default recording)
  capture-modules   capture --torch-modules
  capture-memory    capture --torch-modules=memory
  nsys-autograd     Nsight Systems -t cuda,nvtx --pytorch=autograd-nvtx (an NVTX range per aten op)
  torch-profiler    torch.profiler with with_modules=True and with_stack=True (CPU and CUDA activities; the first
                    sitting ran with_modules=True alone, which records no module hierarchy for an eager model)

Writes every sample, and per mode the median with min–max and the per-round ratio to that round's uncaptured run.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "workloads", "qwen3_decode.py")


def command(mode, args, scratch):
    python = [sys.executable, WORKLOAD]
    capture = [args.capture, "-o", os.path.join(scratch, "c.sqlite"), "--force", "--no-nccl-plugin"]
    if mode == "uncaptured":
        return python, {}
    if mode == "capture":
        return capture + ["--"] + python, {}
    if mode == "capture-modules":
        return capture + ["--torch-modules", "--"] + python, {}
    if mode == "capture-memory":
        return capture + ["--torch-modules=memory", "--"] + python, {}
    if mode == "nsys-autograd":
        nsys = [args.nsys, "profile", "-t", "cuda,nvtx", "--sample=none", "--cpuctxsw=none",
                "--pytorch=autograd-nvtx", "--force-overwrite=true", "-o", os.path.join(scratch, "n")]
        return nsys + python, {}
    if mode == "torch-profiler":
        return python, {"TORCH_PROF": os.path.join(scratch, "t.json")}
    raise SystemExit(f"unknown mode {mode}")


def run_once(mode, args, scratch):
    argv, extra_env = command(mode, args, scratch)
    env = dict(os.environ, MODE="eager", **extra_env)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.timeout_s)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{") and '"step_ms"' in line:
            return json.loads(line)["step_ms"]
    print(f"{mode}: no result (exit {done.returncode}): {done.stderr[-600:]}", file=sys.stderr)
    return None


def summary(samples, rounds, modes):
    out = {}
    for mode in modes:
        values = [v for v in samples[mode] if v is not None]
        ratios = [r[mode] / r["uncaptured"] for r in rounds if r.get(mode) and r.get("uncaptured")]
        out[mode] = {
            "n": len(values),
            "median_step_ms": statistics.median(values) if values else None,
            "min_step_ms": min(values) if values else None,
            "max_step_ms": max(values) if values else None,
            "per_round_ratio_median": statistics.median(ratios) if ratios else None,
            "per_round_ratio_min": min(ratios) if ratios else None,
            "per_round_ratio_max": max(ratios) if ratios else None,
        }
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capture", default="capture")
    parser.add_argument("--nsys", default="nsys")
    parser.add_argument("--mode", action="append", dest="modes")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--budget-s", type=float, default=600, help="start no round after this many seconds")
    parser.add_argument("--timeout-s", type=float, default=240)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    modes = args.modes or ["uncaptured", "capture", "capture-modules", "nsys-autograd", "torch-profiler"]
    if "uncaptured" not in modes:
        modes.insert(0, "uncaptured")
    samples = {mode: [] for mode in modes}
    rounds = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            if time.monotonic() - started > args.budget_s:
                break
            order = modes[round_index % len(modes):] + modes[:round_index % len(modes)]
            this_round = {"order": order}
            for mode in order:
                value = run_once(mode, args, scratch)
                samples[mode].append(value)
                this_round[mode] = value
            rounds.append(this_round)
            print(json.dumps(this_round), flush=True)
    env_keys = ["LAYERS", "HIDDEN", "PROMPT", "DECODE"]
    result = {
        "workload": "workloads/qwen3_decode.py MODE=eager",
        "settings": {key: os.environ.get(key) for key in env_keys},
        "rounds": rounds,
        "summary": summary(samples, rounds, modes),
    }
    with open(args.out, "w") as out:
        json.dump(result, out, indent=1)
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
