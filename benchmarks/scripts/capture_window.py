#!/usr/bin/env python3
"""What recording in windows costs, on one GPU: recording off outside a window, CUDA graphs at node and graph
level, and a long run captured in short repeated windows against the whole run.

Parts, one after another (each round runs every mode of a part once, the order rotated by one each round; every
sample goes to the results file as it comes; no round starts once `--budget-s` is spent):

- `launch`: host time per launch of a launch-bound program (`workloads/launch_cost.cu`, bare launches, and
  `workloads/torch_launch_cost.py`, PyTorch operators) uncaptured, under `capture --cuda-profiler-api` with no
  `cudaProfilerStart` in the program (recording off for the whole run: what a server pays outside its windows),
  and under a whole-run capture. `--launch-modes` adds modes that leave one part of the injection library off
  while recording is off (`SHARDSCOPE_INJECT_OMIT`, see `capture/inject/src/omit.rs`), to find what costs a
  launch there: `capture-off-bare` (CUPTI loaded, nothing subscribed or switched on), `capture-off-subscribed`
  (the subscription alone), `capture-off-no-triggers` (no profiler-API callbacks), `capture-off-driver-trigger`
  (the driver ones only), `capture-off-no-device` (no device kind), `capture-off-no-preload` (the library not
  preloaded: `--no-client-guard`), `capture-off-attached` / `capture-off-detached` (CUPTI kept attached, or
  detached, outside windows: `--outside-windows`; `capture-off` is `auto`, which detaches where a shared CUDA
  runtime is loaded: build the CUDA programs with `--cudart shared` to compare), `capture-off-baseline` (recording
  off under another build, `--baseline-capture`, to compare two builds in one sitting), `capture-off-no-nvtx`
  (NVTX not traced, so NVTX's calls are not handed to the library), and without `capture`: `inject-idle` (the
  library loaded by CUDA, doing nothing), `preload-only`, `cupti-preload` (libcupti preloaded, nothing calling it),
  `nvtx-inject` (the library as NVTX's injection only). `--torch-modes` likewise for
  the PyTorch program. `--pin CPUS` runs every command under `taskset -c CPUS`.
- `graph`: wall time per replay of a CUDA graph of 400 tiny kernels replayed back to back
  (`workloads/capture_window.cu graph 400 200 quiet`: kernels that touch no memory, whose time does not depend on
  where an allocation landed; `--graph-kernel counter` for the counter kernels of sittings 1-6): uncaptured, capture node level (default), capture graph level, and, when
  Nsight Systems is given, nsys `--cuda-graph-trace=node` and `=graph`. `--graph-modes` adds graph level without
  API records (`capture-graph-no-api`, `--trace kernel,memcpy,memset,nvtx`), with kernels only
  (`capture-graph-kernel`, `--trace kernel`) and with the graph-trace kind alone (`capture-graph-no-kernel`,
  `--trace nvtx`: no kernel kind on, so kernels outside graphs are not recorded either).

- `pairs`: the bare-launch program uncaptured and under `capture --cuda-profiler-api` (recording off) at the same
  time, each pinned to one of the two `--pair-cpus` (swapped every round), beside a control pair of two
  uncaptured runs the same way: what varies with time on the machine then touches both sides of a pair. Each
  sample's ratio is to its partner; the summary gives the median ratio of each pair (`pairs/cuda`).
- `turns`: the same two programs side by side on one CPU (`--turn-cpu`), taking turns batch by batch
  (`launch_cost.cu`'s LAUNCH_COST_TURNS): each batch of one is timed between two batches of the other, so that the
  level a launch's cost settles at, which on an H200 virtual machine moves over seconds, touches both sides of a
  pair alike. Which side goes first alternates by round; the control is uncaptured beside uncaptured
  (`--turn-modes`, summary `turns/cuda`; `--turn-program torch` takes turns with PyTorch operators instead,
  `torch_launch_cost.py`, summary `turns/torch`).
  Sittings 23–25 (BENCHMARKS.md): the control's quartiles ±1 %, against ±3–5 % for `pairs`.
- `--launch-contexts N` repeats the bare-launch measurement in N fresh contexts of each process
  (`launch_cost.cu`'s third argument) and takes the median of their medians: on an H200 virtual machine the cost
  of a launch moves between two levels (about 3.7k and 4.6k ns) over seconds, inside one process too.

Parts run in the order `--part` names them (check, launch, long, graph when none is named).
- `long`: a long-running program launching small batches (`capture_window.cu steady`), captured whole and in
  repeated windows (`--delay D --duration W --every P`): wall time (launch to capture file), spool bytes, file
  bytes, kernels kept.
- `check` (once): a program that calls cudaProfilerStart/Stop around a few steps (`torch_profiler_window.py` and
  `capture_window.cu profiler`) captured with `--cuda-profiler-api`: the kernels in the capture file against the
  kernels the program launched between the calls (and against `nsys -c cudaProfilerApi` when nsys can export).

    python3 benchmarks/scripts/capture_window.py --capture .devcarry/capture --nsys $NSYS --budget-s 300 --out w.json
"""

import argparse
import errno
import glob
import json
import os
import re
import select
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "..", "..", "workloads")

LAUNCH_MODES = ["uncaptured", "capture-off", "capture"]
GRAPH_MODES = ["uncaptured", "capture-node", "capture-graph", "nsys-node", "nsys-graph"]
# Recording off with one part of the injection library left off (SHARDSCOPE_INJECT_OMIT).
OFF_OMIT = {
    "capture-off-bare": "subscribe",
    "capture-off-subscribed": "activity,graph-nodes,runtime-triggers,driver-triggers",
    "capture-off-no-triggers": "runtime-triggers,driver-triggers",
    "capture-off-driver-trigger": "runtime-triggers",
    "capture-off-no-device": "device-kind",
}
GRAPH_TRACE_KINDS = {"capture-graph-no-api": "kernel,memcpy,memset,nvtx", "capture-graph-kernel": "kernel",
                     "capture-graph-no-kernel": "nvtx"}
# Recording off with CUPTI kept attached or detached whatever the triggers (`--outside-windows`; plain
# `capture-off` is `auto`).
OUTSIDE_WINDOWS = {"capture-off-attached": "attached", "capture-off-detached": "detached"}
# The injection library without `capture`: loaded by CUDA and doing nothing (no spool folder given), or only
# preloaded; or CUPTI alone, preloaded (its initialisers run, nothing calls it); or the library as NVTX's
# injection only (it hands NVTX to CUPTI at the first NVTX call); the program runs as uncaptured otherwise.
BARE_LIBRARY = {"inject-idle": "CUDA_INJECTION64_PATH", "preload-only": "LD_PRELOAD", "cupti-preload": "LD_PRELOAD",
                "nvtx-inject": "NVTX_INJECTION64_PATH"}
# Recording off with NVTX not traced, so that `capture` leaves NVTX_INJECTION64_PATH unset.
NO_NVTX_TRACE = "kernel,memcpy,memset,api,sync"
# Nsight Systems waiting for a cudaProfilerStart that never comes (`-c cudaProfilerApi`): its recording off, the
# reference for what a recorder costs outside its windows.
KNOWN_LAUNCH_MODES = (LAUNCH_MODES + list(OFF_OMIT) + list(OUTSIDE_WINDOWS)
                      + ["capture-off-no-preload", "capture-off-baseline", "capture-off-no-nvtx"]
                      + list(BARE_LIBRARY) + ["nsys-off"])
KNOWN_GRAPH_MODES = GRAPH_MODES + list(GRAPH_TRACE_KINDS) + ["capture-off"] + list(OUTSIDE_WINDOWS)
LONG_MODES = ["uncaptured", "capture-whole", "capture-windows"]
LAUNCH_LINE = re.compile(r"launch_ns median ([0-9.]+)")
REPLAY_LINE = re.compile(r"replay_us ([0-9.]+)")
STEADY_LINE = re.compile(r"steady launches (\d+) elapsed_s ([0-9.]+)")
BETWEEN_LINE = re.compile(r"launched_between (\d+)")
NVTX_STEPS_LINE = re.compile(r"nvtx_steps_between (\d+)")


def rotated(modes, round_index):
    shift = round_index % len(modes)
    return modes[shift:] + modes[:shift]


def recorder_env(args, mode):
    """What `mode` adds to the environment: the parts of the injection library it leaves off, or the library
    itself for the modes without `capture`."""
    if mode == "cupti-preload":
        return {"LD_PRELOAD": args.cupti_lib}
    if mode in BARE_LIBRARY:
        return {BARE_LIBRARY[mode]: inject_library(args)}
    return {"SHARDSCOPE_INJECT_OMIT": OFF_OMIT[mode]} if mode in OFF_OMIT else {}


def inject_library(args):
    """The injection library `capture` would use: `--inject-lib`, else the one beside the capture binary."""
    if args.inject_lib:
        return os.path.abspath(args.inject_lib)
    capture = shutil.which(args.capture) or args.capture
    return os.path.join(os.path.dirname(os.path.abspath(capture)), "libshardscope_inject.so")


def recorder_command(args, mode, program, scratch, extra=()):
    """The command line of `program` under `mode`'s recorder."""
    out = os.path.join(scratch, f"{mode}.sqlite")
    capture = [args.capture, "--force", "--no-nccl-plugin", "-o", out]
    if mode == "uncaptured" or mode in BARE_LIBRARY:
        return program
    if mode in ("capture", "capture-node", "capture-whole"):
        return capture + list(extra) + ["--"] + program
    if mode == "capture-off" or mode in OFF_OMIT:
        return capture + ["--cuda-profiler-api", "--"] + program
    if mode == "capture-off-baseline":
        return [args.baseline_capture] + capture[1:] + ["--cuda-profiler-api", "--"] + program
    if mode in OUTSIDE_WINDOWS:
        return capture + ["--cuda-profiler-api", "--outside-windows", OUTSIDE_WINDOWS[mode], "--"] + program
    if mode == "capture-off-no-nvtx":
        return capture + ["--cuda-profiler-api", "--trace", NO_NVTX_TRACE, "--"] + program
    if mode == "capture-off-no-preload":
        return capture + ["--cuda-profiler-api", "--no-client-guard", "--"] + program
    if mode == "capture-graph":
        return capture + ["--cuda-graph-trace", "graph", "--"] + program
    if mode in GRAPH_TRACE_KINDS:
        return capture + ["--cuda-graph-trace", "graph", "--trace", GRAPH_TRACE_KINDS[mode], "--"] + program
    if mode == "capture-windows":
        return capture + list(extra) + ["--"] + program
    if mode == "nsys-off":
        return [args.nsys, "profile", "-t", "cuda", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true",
                "-c", "cudaProfilerApi", "-o", os.path.join(scratch, mode)] + program
    if mode in ("nsys-node", "nsys-graph"):
        return [args.nsys, "profile", "-t", "cuda", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true",
                f"--cuda-graph-trace={mode.split('-')[1]}", "-o", os.path.join(scratch, mode)] + program
    raise ValueError(mode)


PIN = []


def run(command, timeout_s, extra_env=None):
    command = PIN + list(command)
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES="0", PYTHONUNBUFFERED="1", **(extra_env or {})))
    return done, time.monotonic() - started


def number(pattern, text, group=1):
    found = pattern.search(text)
    return float(found[group]) if found else None


def keep(results, sample, out):
    results["samples"].append(sample)
    results["summary"] = summarise(results["samples"])
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


def summarise(samples):
    """Per part, program and mode: median with min and max of the figure, and its median ratio to uncaptured
    in the same round."""
    summary = {}
    keys = sorted({(s["part"], s["program"]) for s in samples
                   if "value" in s and s["part"] not in ("pairs", "turns")})
    for part, program in keys:
        rows = {}
        mine = [s for s in samples if s["part"] == part and s["program"] == program and s.get("value") is not None]
        for mode in sorted({s["mode"] for s in mine}):
            values = [s["value"] for s in mine if s["mode"] == mode]
            ratios = []
            for s in (s for s in mine if s["mode"] == mode):
                base = [b["value"] for b in mine if b["mode"] == "uncaptured" and b["round"] == s["round"]]
                if base and base[0]:
                    ratios.append(s["value"] / base[0])
            row = {"n": len(values), "median": round(statistics.median(values), 3), "min": round(min(values), 3),
                   "max": round(max(values), 3), "unit": mine[0]["unit"]}
            if ratios:
                row.update({"ratio_median": round(statistics.median(ratios), 4), "ratio_min": round(min(ratios), 4),
                            "ratio_max": round(max(ratios), 4)})
            for extra in ("spool_bytes", "file_bytes", "kernels", "wall_s"):
                extras = [s[extra] for s in mine if s["mode"] == mode and s.get(extra) is not None]
                if extras:
                    row[extra + "_median"] = statistics.median(extras)
            rows[mode] = row
        summary[f"{part}/{program}"] = rows
    pairs = [s for s in samples if s["part"] == "pairs"]
    if pairs:
        # Each pair's ratio is to its own partner, not to an uncaptured run of the round.
        summary["pairs/cuda"] = summarise_pairs(pairs)
    for program in sorted({s["program"] for s in samples if s["part"] == "turns"}):
        summary[f"turns/{program}"] = summarise_pairs([s for s in samples if s["part"] == "turns"
                                                       and s["program"] == program])
    return summary


def kernel_rows(path):
    """Kernel count and distinct short names of a capture or nsys export."""
    if not os.path.exists(path):
        return None, None
    con = sqlite3.connect(path)
    try:
        count = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        names = [r[0] for r in con.execute("SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                           "JOIN StringIds s ON s.id = k.shortName")]
        return count, sorted(names)
    except sqlite3.Error:
        return 0, []
    finally:
        con.close()


def nvtx_rows(path):
    """NVTX ranges of a capture or nsys export counted by (domain, name): "default" for the default domain; None
    without the file."""
    if not os.path.exists(path):
        return None
    con = sqlite3.connect(path)
    try:
        rows = con.execute(
            "SELECT COALESCE((SELECT d.text FROM NVTX_EVENTS d WHERE d.eventType = 75 AND d.domainId = e.domainId "
            "LIMIT 1), 'default'), COALESCE(e.text, (SELECT value FROM StringIds WHERE id = e.textId)), count(*) "
            "FROM NVTX_EVENTS e WHERE e.eventType <> 75 GROUP BY 1, 2").fetchall()
        return {f"{domain}/{name}": count for domain, name, count in rows}
    except sqlite3.Error as e:
        return {"error": str(e)}
    finally:
        con.close()


def gpu_rows(path):
    """GPUs described in a capture file (`TARGET_INFO_GPU`, from CUPTI's device records), None without the file."""
    if not os.path.exists(path):
        return None
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT count(*) FROM TARGET_INFO_GPU WHERE totalMemory > 0").fetchone()[0]
    except sqlite3.Error:
        return 0
    finally:
        con.close()


def folder_bytes(path):
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "*")) if os.path.isfile(f))


def launch_part(args, results, r, programs):
    for program in programs:
        for position, mode in enumerate(rotated(program["modes"], r)):
            command = recorder_command(args, mode, program["command"], args.scratch)
            done, wall_s = run(command, args.timeout_s, recorder_env(args, mode))
            sample = {"part": "launch", "program": program["name"], "mode": mode, "round": r, "position": position,
                      "unit": "ns per launch", "value": number(LAUNCH_LINE, done.stdout), "wall_s": round(wall_s, 2),
                      "exit_code": done.returncode}
            if sample["value"] is None:
                sample["stderr_tail"] = done.stderr[-1500:]
            print(f"launch r{r} {program['name']} {mode}: {sample['value']} ns", flush=True)
            keep(results, sample, args.out)


def pairs_part(args, results, r, program):
    """One round of the side-by-side pairs: uncaptured beside each of `--pair-modes`, and beside uncaptured."""
    cpus = args.pair_cpus if r % 2 == 0 else args.pair_cpus[::-1]
    scratch = os.path.join(args.scratch, "pair")
    os.makedirs(scratch, exist_ok=True)
    for other in rotated(args.pair_modes + ["uncaptured"], r):
        started = time.monotonic()
        outputs, codes, _ = run_pair(args, program, scratch, [("uncaptured", cpus[0], {}), (other, cpus[1], {})],
                                     started)
        keep_pair(args, results, {"part": "pairs", "program": "cuda", "round": r, "cpus": cpus}, other, outputs,
                  codes, started, True)


def turns_part(args, results, r, program):
    """One round of turn-taking pairs on one CPU: uncaptured beside each of `--turn-modes`, and beside
    uncaptured; the side that starts alternates by round."""
    scratch = os.path.join(args.scratch, "turns")
    os.makedirs(scratch, exist_ok=True)
    for other in rotated(args.turn_modes + ["uncaptured"], r):
        fifos = [os.path.join(scratch, name) for name in ("a", "b", "ready")]
        for path in fifos:
            if os.path.exists(path):
                os.unlink(path)
            os.mkfifo(path)
        turns = [f"{fifos[0]},{fifos[1]},{fifos[2]}", f"{fifos[1]},{fifos[0]},{fifos[2]}"]
        sides = [(mode, args.turn_cpu, {"LAUNCH_COST_TURNS": turns[i]}) for i, mode in enumerate(["uncaptured", other])]
        first = r % 2
        started = time.monotonic()
        outputs, codes, began = run_pair(args, program, scratch, sides, started,
                                         lambda: start_turns(fifos, first, started + args.timeout_s))
        base = {"part": "turns", "program": args.turn_program, "round": r, "cpu": args.turn_cpu,
                "first": sides[first][0]}
        keep_pair(args, results, base, other, outputs, codes, started, began)


def run_pair(args, program, scratch, sides, started, while_running=lambda: True):
    """Starts `program` once per side (mode, CPU, environment added) at the same time, runs `while_running()`,
    and returns both sides' (stdout, stderr), their exit codes and what `while_running` returned; a side still
    running `--timeout-s` after `started` is killed."""
    running = [subprocess.Popen(["taskset", "-c", cpu] + recorder_command(args, mode, program, scratch),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, CUDA_VISIBLE_DEVICES="0", **extra, **recorder_env(args, mode)))
               for mode, cpu, extra in sides]
    went = while_running()
    outputs = [finish(p, started + args.timeout_s) for p in running]
    return outputs, [p.returncode for p in running], went


def keep_pair(args, results, base, other, outputs, codes, started, went):
    """Keeps one pair's sample: `base` with the mode, the mode's ns per launch and its uncaptured partner's, the
    stderr tails when a figure is missing or the pair did not go as planned (`went` false)."""
    values = [number(LAUNCH_LINE, out) for out, _ in outputs]
    pair = "uncaptured-control" if other == "uncaptured" else other
    sample = dict(base, mode=pair, unit="ns per launch", value=values[1], partner_value=values[0],
                  wall_s=round(time.monotonic() - started, 2), exit_codes=codes)
    if None in values or not went:
        sample["stderr_tail"] = [err[-1500:] for _, err in outputs]
    print(f"{base['part']} r{base['round']} uncaptured|{pair}: {values[0]} | {values[1]} ns", flush=True)
    keep(results, sample, args.out)


def start_turns(fifos, first, deadline):
    """Wait until both sides have written their ready byte, then hand the first turn to side `first`;
    False when the deadline came first (a side that failed to start; `finish` then kills the other)."""
    ready = os.open(fifos[2], os.O_RDWR | os.O_NONBLOCK)
    try:
        seen = 0
        while seen < 2:
            wait_s = deadline - time.monotonic()
            if wait_s <= 0 or not select.select([ready], [], [], wait_s)[0]:
                return False
            try:
                seen += len(os.read(ready, 2 - seen))
            except OSError as e:
                if e.errno != errno.EAGAIN:
                    raise
        first_in = os.open(fifos[first], os.O_RDWR)
        os.write(first_in, b"t")
        os.close(first_in)
        return True
    finally:
        os.close(ready)


def finish(process, deadline):
    """The (stdout, stderr) of `process` by `deadline` (monotonic seconds); killed past it, with what it wrote."""
    try:
        return process.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        return out, err + "\n(killed: past --timeout-s)"


def summarise_pairs(pairs):
    """Per pair (the control last): the median of each sample's ratio to its partner, with min, max and quartiles."""
    rows = {}
    modes = sorted({s["mode"] for s in pairs} - {"uncaptured-control"}) + ["uncaptured-control"]
    for pair in modes:
        ratios = sorted(s["value"] / s["partner_value"] for s in pairs
                        if s["mode"] == pair and s["value"] and s["partner_value"])
        if ratios:
            quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
            low, high = median_interval(ratios)
            rows[pair] = {"n": len(ratios), "ratio_median": round(statistics.median(ratios), 4),
                          "ratio_median_ci95": [round(low, 4), round(high, 4)],
                          "ratio_q1": round(quartiles[0], 4), "ratio_q3": round(quartiles[2], 4),
                          "ratio_min": round(ratios[0], 4), "ratio_max": round(ratios[-1], 4)}
    return rows


def median_interval(ordered):
    """About 95 % of the median of `ordered` (sorted), by order statistics: the ratios at ranks n/2 ± 0.98·√n,
    which needs no assumption about their distribution."""
    n = len(ordered)
    half_width = 0.98 * n ** 0.5
    low = max(0, int(n / 2 - half_width) - 1)
    high = min(n - 1, int(n / 2 + half_width + 0.999))
    return ordered[low], ordered[high]


def graph_part(args, results, r, binary):
    with_nsys = args.nsys and r < args.nsys_rounds
    modes = [m for m in args.graph_modes if with_nsys or not m.startswith("nsys")]
    program = [binary, "graph", "400", "200"] + (["quiet"] if args.graph_kernel == "quiet" else [])
    for position, mode in enumerate(rotated(modes, r)):
        done, wall_s = run(recorder_command(args, mode, program, args.scratch), args.timeout_s)
        sample = {"part": "graph", "program": "graph400", "mode": mode, "round": r, "position": position,
                  "unit": "us per replay", "value": number(REPLAY_LINE, done.stdout), "wall_s": round(wall_s, 2),
                  "exit_code": done.returncode}
        if mode.startswith("capture"):
            sample["kernels"], _ = kernel_rows(os.path.join(args.scratch, f"{mode}.sqlite"))
        if sample["value"] is None:
            sample["stderr_tail"] = done.stderr[-1500:]
        print(f"graph r{r} {mode}: {sample['value']} us/replay", flush=True)
        keep(results, sample, args.out)


def long_part(args, results, r, binary):
    program = [binary, "steady", str(args.long_s)]
    windows = ["--delay", str(args.window_every_s / 2), "--duration", str(args.window_s), "--every",
               str(args.window_every_s)]
    for position, mode in enumerate(rotated(LONG_MODES, r)):
        spool = os.path.join(args.scratch, f"spool-{mode}")
        shutil.rmtree(spool, ignore_errors=True)
        extra = ["--keep-spool", "--spool-dir", spool] + (windows if mode == "capture-windows" else [])
        done, wall_s = run(recorder_command(args, mode, program, args.scratch, extra), args.timeout_s)
        out = os.path.join(args.scratch, f"{mode}.sqlite")
        sample = {"part": "long", "program": f"steady{args.long_s:g}s", "mode": mode, "round": r,
                  "position": position, "unit": "s wall (launch to capture file)", "value": round(wall_s, 3),
                  "program_elapsed_s": number(STEADY_LINE, done.stdout, 2),
                  "launches": number(STEADY_LINE, done.stdout, 1), "exit_code": done.returncode}
        if mode != "uncaptured":
            sample.update({"spool_bytes": folder_bytes(spool),
                           "file_bytes": os.path.getsize(out) if os.path.exists(out) else None})
            sample["kernels"], _ = kernel_rows(out)
            if mode == "capture-windows" and os.path.exists(out):
                con = sqlite3.connect(out)
                try:
                    sample["windows"] = con.execute("SELECT start, end, startTrigger, endTrigger FROM "
                                                    "SHARDSCOPE_CAPTURE_WINDOWS").fetchall()
                except sqlite3.Error as e:
                    sample["windows_error"] = str(e)
                con.close()
        shutil.rmtree(spool, ignore_errors=True)
        print(f"long r{r} {mode}: {wall_s:.2f} s, spool {sample.get('spool_bytes')} B, kernels "
              f"{sample.get('kernels')}", flush=True)
        keep(results, sample, args.out)


def nsys_profiler_count(args, program):
    """Kernels `nsys -c cudaProfilerApi` kept, when nsys can make an export here (else None)."""
    base = os.path.join(args.scratch, "nsys-check")
    profile = [args.nsys, "profile", "-t", "cuda", "--sample=none", "--cpuctxsw=none", "-c", "cudaProfilerApi",
               "--force-overwrite=true", "-o", base] + program
    done, _ = run(profile, args.timeout_s)
    if not os.path.exists(base + ".nsys-rep"):
        return None, "nsys profile made no report: " + done.stderr[-300:]
    export = [args.nsys, "export", "--type", "sqlite", "--force-overwrite=true", "-o", base + ".sqlite",
              base + ".nsys-rep"]
    done, _ = run(export, args.timeout_s)
    count, names = kernel_rows(base + ".sqlite")
    return (count, names), None if count is not None else done.stderr[-300:]


def check_part(args, results, binary):
    programs = [("torch", ["python3", os.path.join(WORKLOADS, "torch_profiler_window.py"), "30", "10", "14"]),
                ("cuda", [binary, "profiler", "30", "10", "14", "7"])]
    for name, program in programs:
        done, _ = run(program, args.timeout_s)
        expected = number(BETWEEN_LINE, done.stdout)
        nvtx_expected = number(NVTX_STEPS_LINE, done.stdout)
        out = os.path.join(args.scratch, "check.sqlite")
        captured, _ = run([args.capture, "--force", "--cuda-profiler-api", "-o", out, "--"] + program, args.timeout_s)
        count, names = kernel_rows(out)
        sample = {"part": "check", "program": name, "mode": "capture --cuda-profiler-api",
                  "launched_between": expected, "kernels_kept": count, "kernel_names": names,
                  "gpus_described": gpu_rows(out),
                  "nvtx_steps_between": nvtx_expected, "nvtx_ranges_kept": nvtx_rows(out),
                  "exact": expected is not None and count == expected,
                  "capture_stderr_tail": captured.stderr[-800:]}
        if args.nsys:
            nsys, problem = nsys_profiler_count(args, program)
            sample["nsys_kernels"], sample["nsys_names"] = nsys if nsys else (None, None)
            if problem:
                sample["nsys_problem"] = problem
        print(f"check {name}: launched {expected}, kept {count}, nsys {sample.get('nsys_kernels')}; NVTX steps "
              f"{nvtx_expected}, kept {sample['nvtx_ranges_kept']}", flush=True)
        results["samples"].append(sample)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capture", default="capture")
    parser.add_argument("--nsys", default=None, help="Nsight Systems CLI (nsys modes are left out without it)")
    parser.add_argument("--nvcc", default="nvcc")
    parser.add_argument("--part", action="append", choices=["check", "launch", "graph", "long", "pairs", "turns"])
    parser.add_argument("--launch-rounds", type=int, default=6, help="rounds of the bare-launch program")
    parser.add_argument("--launch-contexts", type=int, default=1,
                        help="fresh contexts per bare-launch process (median of their medians)")
    parser.add_argument("--pair-rounds", type=int, default=20, help="rounds of the side-by-side pairs")
    parser.add_argument("--pair-cpus", default="3,5", help="the two CPUs of a pair, comma-separated")
    parser.add_argument("--pair-modes", default="capture-off",
                        help="modes run beside uncaptured in the pairs part, comma-separated (launch modes)")
    parser.add_argument("--turn-rounds", type=int, default=20, help="rounds of the turn-taking pairs")
    parser.add_argument("--turn-cpu", default="3", help="the one CPU both sides of a turn-taking pair run on")
    parser.add_argument("--turn-program", choices=["cuda", "torch"], default="cuda",
                        help="the program of the turns part: bare launches (launch_cost.cu) or PyTorch operators "
                             "(torch_launch_cost.py)")
    parser.add_argument("--turn-modes", default="capture-off",
                        help="modes run beside uncaptured in the turns part, comma-separated (launch modes)")
    parser.add_argument("--baseline-capture", default=None,
                        help="another build of capture (its injection library beside it) for the capture-off-baseline "
                             "mode: recording off under that build, to set two builds side by side in one sitting")
    parser.add_argument("--inject-lib", default=None,
                        help="the injection library for inject-idle and preload-only (default: beside --capture)")
    parser.add_argument("--cupti-lib", default="/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
                        help="libcupti for the cupti-preload mode (default: %(default)s)")
    parser.add_argument("--torch-rounds", type=int, default=3, help="rounds of the PyTorch launch program")
    parser.add_argument("--graph-rounds", type=int, default=4)
    parser.add_argument("--nsys-rounds", type=int, default=3, help="graph rounds that include the nsys modes")
    parser.add_argument("--graph-kernel", choices=["quiet", "counter"], default="quiet",
                        help="graph kernels that touch no memory (quiet) or add to a counter (the replay time then "
                             "depends on where the counter landed, by up to 17 %% on an H200)")
    parser.add_argument("--long-rounds", type=int, default=2)
    parser.add_argument("--long-s", type=float, default=12.0, help="length of the long-running program")
    parser.add_argument("--window-s", type=float, default=0.5)
    parser.add_argument("--window-every-s", type=float, default=2.5)
    parser.add_argument("--budget-s", type=float, default=300, help="start no new round after this long")
    parser.add_argument("--scratch", default="/tmp/capture-window")
    parser.add_argument("--timeout-s", type=float, default=120)
    parser.add_argument("--launch-modes", default=",".join(LAUNCH_MODES),
                        help="modes of the bare-launch program, comma-separated (known: %(default)s, "
                             + ", ".join(m for m in KNOWN_LAUNCH_MODES if m not in LAUNCH_MODES) + ")")
    parser.add_argument("--torch-modes", default=",".join(LAUNCH_MODES), help="modes of the PyTorch program")
    parser.add_argument("--graph-modes", default=",".join(GRAPH_MODES),
                        help="graph modes (known: %(default)s, " + ", ".join(GRAPH_TRACE_KINDS) + ")")
    parser.add_argument("--cudart", choices=["static", "shared"], default="static",
                        help="how the CUDA programs link the CUDA runtime (nvcc's default: static)")
    parser.add_argument("--launch-batches", type=int, default=2000, help="batches of 100 launches per bare-launch run")
    parser.add_argument("--pin", default=None, help="run every command on these CPUs (taskset -c), for steadier rounds")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.pin:
        PIN[:] = ["taskset", "-c", args.pin]
    args.pair_cpus = [c.strip() for c in args.pair_cpus.split(",")]
    if len(args.pair_cpus) != 2 or not all(c.isdigit() for c in args.pair_cpus) or args.pair_cpus[0] == args.pair_cpus[1]:
        parser.error("--pair-cpus: two different CPU numbers, comma-separated")
    if not 1 <= args.launch_contexts <= 1000:
        parser.error("--launch-contexts: 1 to 1000")
    if not args.turn_cpu.isdigit():
        parser.error("--turn-cpu: one CPU number")
    for option in ("pair_modes", "turn_modes"):
        modes = [m.strip() for m in getattr(args, option).split(",") if m.strip()]
        unknown = [m for m in modes if m not in KNOWN_LAUNCH_MODES or m == "uncaptured"]
        flag = "--" + option.replace("_", "-")
        if unknown or not modes:
            parser.error(f"{flag}: unknown {unknown}" if unknown else f"{flag}: at least one mode")
        setattr(args, option, modes)
    for option, known in (("launch_modes", KNOWN_LAUNCH_MODES), ("torch_modes", KNOWN_LAUNCH_MODES),
                          ("graph_modes", KNOWN_GRAPH_MODES)):
        modes = [m.strip() for m in getattr(args, option).split(",") if m.strip()]
        unknown = [m for m in modes if m not in known]
        if unknown or "uncaptured" not in modes:
            parser.error(f"--{option.replace('_', '-')}: unknown {unknown}" if unknown else
                         f"--{option.replace('_', '-')}: the ratios need the uncaptured mode")
        setattr(args, option, modes)
    every_launch_mode = args.pair_modes + args.turn_modes + args.launch_modes + args.torch_modes
    cupti_modes = [m for m in every_launch_mode if m == "cupti-preload"]
    if cupti_modes and not os.path.isfile(args.cupti_lib):
        parser.error(f"--cupti-lib: no file {args.cupti_lib!r} (the cupti-preload mode needs it)")
    baseline_modes = [m for m in every_launch_mode if m == "capture-off-baseline"]
    if baseline_modes and not (args.baseline_capture and os.path.isfile(args.baseline_capture)):
        parser.error("--baseline-capture: the capture-off-baseline mode needs that build's capture binary")
    nsys_modes = [m for m in every_launch_mode if m == "nsys-off"]
    if nsys_modes and not (args.nsys and os.path.isfile(args.nsys)):
        parser.error("--nsys: the nsys-off mode needs the nsys binary")
    parts = args.part or ["check", "launch", "long", "graph"]
    started = time.monotonic()
    os.makedirs(args.scratch, exist_ok=True)
    binary = os.path.join(args.scratch, "capture_window")
    nvcc = [args.nvcc, "-O2", "-cudart", args.cudart]
    subprocess.run(nvcc + ["-o", binary, os.path.join(WORKLOADS, "capture_window.cu")], check=True)
    launch_binary = os.path.join(args.scratch, "launch_cost")
    subprocess.run(nvcc + ["-o", launch_binary, os.path.join(WORKLOADS, "launch_cost.cu")], check=True)
    bare_launch = [launch_binary, str(args.launch_batches), "100", str(args.launch_contexts)]
    programs = [{"name": "cuda", "command": bare_launch, "modes": args.launch_modes},
                {"name": "torch", "command": ["python3", os.path.join(WORKLOADS, "torch_launch_cost.py"), "300", "100"],
                 "modes": args.torch_modes}]
    try:
        gpu = subprocess.run(["nvidia-smi", "--id=0", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except OSError as e:
        gpu = f"unknown ({e})"
    results = {"command": sys.argv, "gpu": gpu, "samples": [], "rounds_done": {}}
    if "check" in parts:
        check_part(args, results, binary)
    # Part after part, each with its modes interleaved round by round; no round starts once the budget is spent.
    rounds = {"launch": max(args.launch_rounds, args.torch_rounds), "long": args.long_rounds,
              "graph": args.graph_rounds, "pairs": args.pair_rounds, "turns": args.turn_rounds}
    for part in (p for p in parts if p != "check"):
        for r in range(rounds[part]):
            if time.monotonic() - started > args.budget_s:
                print(f"budget spent: {part} stopped after {r} rounds", flush=True)
                break
            if part == "launch":
                chosen = [p for p in programs if r < (args.launch_rounds if p["name"] == "cuda" else args.torch_rounds)]
                launch_part(args, results, r, chosen)
            elif part == "long":
                long_part(args, results, r, binary)
            elif part == "pairs":
                pairs_part(args, results, r, bare_launch)
            elif part == "turns":
                turn_program = ([launch_binary, str(args.launch_batches), "100", "1"] if args.turn_program == "cuda"
                                else ["python3", os.path.join(WORKLOADS, "torch_launch_cost.py"),
                                      str(args.launch_batches), "100"])
                turns_part(args, results, r, turn_program)
            else:
                graph_part(args, results, r, binary)
            results["rounds_done"][part] = r + 1
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    shutil.rmtree(args.scratch, ignore_errors=True)
    print(json.dumps(results.get("summary", {}), indent=1))


if __name__ == "__main__":
    main()
