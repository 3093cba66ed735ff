#!/usr/bin/env python3
"""Capture overhead on a sharded run: interleaved rounds of the reference workload under every recorder.

Each round runs every mode once, in an order rotated by one each round, so that drift of the machine
(clocks, other tenants, caches) falls on every mode alike. The figure is the workload's own timed region:
`tp_llm.py` prints `gpu_ms` per rank; a sharded step is as slow as its slowest rank, so the slower rank's
value is the sample. Every sample is written to the results file as soon as it is taken (a run cut short
keeps what it measured), with the recorder's own summary lines for `capture`.

    python3 benchmarks/scripts/capture_overhead.py --workload tp_llm.py --capture target/release/capture \\
        --config tp2 --config tp2-launch --config tp1 --rounds 8 --out results.json

Configurations (the reference workload's environment):
  tp2         2 GPUs, default size (LAYERS=8 BATCH=4 SEQ=1024 DECODE=32 REPS=3)
  tp2-launch  2 GPUs, launch-bound (BATCH=1 SEQ=128 DECODE=64)
  tp1         1 GPU, default size

Modes: uncaptured, capture (defaults), capture-comm-only (`--comm-only`: NCCL's GPU timers and NVTX, CUPTI
timing nothing), capture-timers (defaults plus the NCCL plugin's GPU timers: both clocks on the same collectives),
capture-no-guard (defaults without preloading the injection library, which
only notes a profiler the workload starts itself), capture-kernel (kernels only, no NCCL plugin: the floor of any
CUPTI recorder), capture-no-sync (defaults without synchronisation records), capture-no-plugin (defaults
without the NCCL profiler plugin), capture-api-all (every API call and the NCCL plugin's GPU timers: the earlier default),
nsys (`nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none`), torch-profiler (CPU+CUDA activities,
trace not saved).

`--bind numa` pins every rank to the CPUs of its GPU's NUMA node in every mode, so that the host launch path
does not move between sockets from one run to the next. `--bind cores` pins rank r to CPUs 8r..8r+7, so that
two ranks' launching threads never share a core.
"""

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

CONFIGS = {
    "tp2": {"nproc": 2, "env": {}},
    "tp2-launch": {"nproc": 2, "env": {"BATCH": "1", "SEQ": "128", "DECODE": "64"}},
    "tp1": {"nproc": 1, "env": {}},
}
MODES = ["uncaptured", "capture", "capture-comm-only", "capture-no-guard", "capture-kernel", "capture-no-sync",
         "capture-no-plugin", "capture-api-all", "capture-timers", "nsys", "torch-profiler"]
GPU_MS = re.compile(r"rank (\d+) world (\d+) gpu_ms ([0-9]+\.[0-9])")


def gpu0_local_cpus():
    """The CPUs of GPU 0's NUMA node, as the kernel lists them for its PCI device (e.g. "0-47,96-143")."""
    bus_id = subprocess.run(["nvidia-smi", "--id=0", "--query-gpu=pci.bus_id", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    # nvidia-smi prints an 8-digit PCI domain; sysfs names the device with 4 digits, in lower case.
    with open(f"/sys/bus/pci/devices/{bus_id[-12:].lower()}/local_cpulist") as f:
        return f.read().strip()


def workload_command(args, nproc):
    if nproc == 1:
        if args.bind == "numa":
            return ["taskset", "-c", gpu0_local_cpus(), "python3", args.workload]
        if args.bind == "cores":
            return ["taskset", "-c", "0-7", "python3", args.workload]
        return ["python3", args.workload]
    launcher = ["python3", "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
    if args.bind == "cores":
        # torchrun starts the wrapper per rank; it pins itself by LOCAL_RANK and becomes the workload.
        return launcher + ["--no-python", "bash", "-c",
                           'exec taskset -c "$((LOCAL_RANK * 8))-$((LOCAL_RANK * 8 + 7))" python3 "$0"', args.workload]
    if args.bind == "numa":
        # torchrun pins each rank to the CPUs of its GPU's NUMA node.
        launcher.append("--numa-binding=node")
    return launcher + [args.workload]


def mode_command(args, mode, base, scratch):
    out = os.path.join(scratch, f"{mode}.sqlite")
    if mode == "uncaptured" or mode == "torch-profiler":
        return base
    if mode == "capture":
        return [args.capture, "--force", "-o", out, "--"] + base
    if mode == "capture-no-guard":
        return [args.capture, "--force", "--no-client-guard", "-o", out, "--"] + base
    if mode == "capture-kernel":
        return [args.capture, "--force", "--trace", "kernel", "--no-nccl-plugin", "-o", out, "--"] + base
    if mode == "capture-no-sync":
        return [args.capture, "--force", "--trace", "kernel,memcpy,memset,api,nvtx", "-o", out, "--"] + base
    if mode == "capture-no-plugin":
        return [args.capture, "--force", "--no-nccl-plugin", "-o", out, "--"] + base
    if mode == "capture-comm-only":
        return [args.capture, "--force", "--comm-only", "-o", out, "--"] + base
    if mode == "capture-timers":
        return [args.capture, "--force", "--trace", "all,nccl-timers", "-o", out, "--"] + base
    if mode == "capture-api-all":
        return [args.capture, "--force", "--trace", "all,api-all,nccl-timers", "-o", out, "--"] + base
    if mode == "nsys":
        return [args.nsys, "profile", "-t", "cuda,nvtx", "--sample=none", "--cpuctxsw=none",
                "--force-overwrite=true", "-o", os.path.join(scratch, "nsys")] + base
    raise ValueError(mode)


def run_once(args, config, mode, scratch):
    spec = CONFIGS[config]
    env = dict(os.environ)
    env.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
                "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    env.update(spec["env"])
    if spec["nproc"] == 1:
        env["WORLD_SIZE"] = "1"
    if mode == "torch-profiler":
        env["TORCH_PROF"] = scratch
        env["PROF_SAVE"] = "0"
    command = mode_command(args, mode, workload_command(args, spec["nproc"]), scratch)
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout_s)
    wall_s = time.monotonic() - started
    ranks = {int(r): float(ms) for r, _, ms in GPU_MS.findall(done.stdout)}
    sample = {
        "config": config,
        "mode": mode,
        "exit_code": done.returncode,
        "wall_s": round(wall_s, 2),
        "gpu_ms_per_rank": ranks,
        "gpu_ms": max(ranks.values()) if len(ranks) == spec["nproc"] else None,
    }
    if mode.startswith("capture"):
        sample["capture_summary"] = [line for line in done.stderr.splitlines() if line.startswith("capture:")]
        capture_file = os.path.join(scratch, f"{mode}.sqlite")
        if args.keep_captures and os.path.exists(capture_file):
            # The latest round's file of each configuration and mode, for comparing what the modes recorded.
            shutil.copy(capture_file, os.path.join(args.keep_captures, f"{config}-{mode}.sqlite"))
    if sample["gpu_ms"] is None:
        sample["stderr_tail"] = done.stderr[-2000:]
    return sample


def rotated(modes, round_index):
    """The modes in this round's order: rotated by one each round, so machine drift falls on every mode alike."""
    shift = round_index % len(modes)
    return modes[shift:] + modes[:shift]


def keep_sample(results, sample, summary, out):
    """Adds a sample and rewrites the results file with it and the new summary, so a run cut short keeps it."""
    results["samples"].append(sample)
    results["summary"] = summary(results["samples"])
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


def summarise(samples, modes):
    summary = {}
    for config in sorted({s["config"] for s in samples}):
        rows = {}
        base = [s["gpu_ms"] for s in samples if s["config"] == config and s["mode"] == "uncaptured" and s["gpu_ms"]]
        base_median = statistics.median(base) if base else None
        for mode in modes:
            values = [s["gpu_ms"] for s in samples if s["config"] == config and s["mode"] == mode and s["gpu_ms"]]
            if not values:
                continue
            median = statistics.median(values)
            # Per round: this mode over the uncaptured run of the same round (the same machine state).
            ratios = []
            for r in sorted({s["round"] for s in samples if s["config"] == config}):
                here = [s["gpu_ms"] for s in samples if s["config"] == config and s["round"] == r and s["gpu_ms"]
                        and s["mode"] == mode]
                ref = [s["gpu_ms"] for s in samples if s["config"] == config and s["round"] == r and s["gpu_ms"]
                       and s["mode"] == "uncaptured"]
                if here and ref:
                    ratios.append(here[0] / ref[0])
            rows[mode] = {
                "n": len(values),
                "median_ms": round(median, 1),
                "min_ms": round(min(values), 1),
                "max_ms": round(max(values), 1),
                "ratio_of_medians": round(median / base_median, 3) if base_median else None,
                "per_round_ratio_median": round(statistics.median(ratios), 3) if ratios else None,
                "per_round_ratio_min": round(min(ratios), 3) if ratios else None,
                "per_round_ratio_max": round(max(ratios), 3) if ratios else None,
            }
        summary[config] = rows
    return summary


def combine(paths, out):
    """One results file from several of one sitting: their samples in order, the summary over all of them."""
    parts = []
    for path in paths:
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
            parts.append(json.load(f))
    modes = []
    for part in parts:
        modes += [m for m in part.get("modes") or [s["mode"] for s in part["samples"]] if m not in modes]
    results = dict(parts[0], command=[p["command"] for p in parts], modes=modes,
                   rounds=sum(p.get("rounds", 0) for p in parts), samples=[s for p in parts for s in p["samples"]])
    results["summary"] = summarise(results["samples"], modes)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(results["summary"], indent=1))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", help="the reference workload, tp_llm.py (required unless --combine)")
    parser.add_argument("--capture", default="capture", help="the capture binary")
    parser.add_argument("--nsys", default="nsys", help="the Nsight Systems CLI")
    parser.add_argument("--config", action="append", choices=sorted(CONFIGS), help="repeatable; default tp2")
    parser.add_argument("--mode", action="append", choices=MODES, help="repeatable; default all")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--first-round", type=int, default=0, help="number of the first round (a sitting split "
                        "over several commands goes on with the next round's mode order)")
    parser.add_argument("--combine", nargs="+", metavar="RESULTS", help="only combine these results files of one "
                        "sitting into --out (samples joined, summary made again)")
    parser.add_argument("--scratch", default="/tmp/capture-overhead")
    parser.add_argument("--timeout-s", type=float, default=300)
    parser.add_argument("--budget-s", type=float, default=None, help="stop starting rounds after this long")
    parser.add_argument("--bind", choices=["none", "numa", "cores"], default="none",
                        help="numa: pin each rank to its GPU's NUMA node (torchrun --numa-binding=node; taskset for 1 GPU); "
                             "cores: pin rank r to CPUs 8r..8r+7")
    parser.add_argument("--out", required=True, help="results JSON (every sample and the summary)")
    parser.add_argument("--keep-captures", default=None, help="folder for the latest capture file of each "
                        "configuration and capture mode")
    parser.add_argument("--rounds-outer", action="store_true", help="run the configurations inside each round "
                        "(round 0 of every configuration, then round 1, …), so a budget cut leaves them even")
    args = parser.parse_args()
    if args.combine:
        combine(args.combine, args.out)
        return
    if not args.workload:
        parser.error("--workload is required")
    configs = args.config or ["tp2"]
    modes = args.mode or MODES
    os.makedirs(args.scratch, exist_ok=True)
    device = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip().splitlines()
    results = {"command": sys.argv, "gpus": device, "rounds": args.rounds, "configs": configs, "modes": modes,
               "bind": args.bind, "samples": []}
    if args.keep_captures:
        os.makedirs(args.keep_captures, exist_ok=True)
    started = time.monotonic()
    if args.rounds_outer:
        plan = [(config, r) for r in range(args.first_round, args.first_round + args.rounds) for config in configs]
    else:
        plan = [(config, r) for config in configs for r in range(args.first_round, args.first_round + args.rounds)]
    for config, r in plan:
        if args.budget_s and time.monotonic() - started > args.budget_s:
            print(f"budget spent: stopping before {config} round {r}", flush=True)
            break
        for position, mode in enumerate(rotated(modes, r)):
            sample = run_once(args, config, mode, args.scratch)
            sample.update({"round": r, "position": position})
            print(f"{config} round {r} {mode}: gpu_ms {sample['gpu_ms']} (exit {sample['exit_code']}, "
                  f"{sample['wall_s']} s)", flush=True)
            keep_sample(results, sample, lambda samples: summarise(samples, modes), args.out)
    shutil.rmtree(args.scratch, ignore_errors=True)
    print(json.dumps(results.get("summary", {}), indent=1))


if __name__ == "__main__":
    main()
