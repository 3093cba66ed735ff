#!/usr/bin/env python3
"""Reference numbers and timings from Holistic Trace Analysis (HTA) 0.5.0.

The analyzer's HTA-compatible figures (communication/computation overlap and the
kernel-type breakdown) are checked against the numbers this script measures with
HTA itself. docs/hta-definitions.md explains what HTA computes; this script only
drives HTA's public entry points and records what they return, per rank.

Usage
  # reference numbers (one JSON file for all given trace sets)
  python scripts/hta_reference.py /path/to/trace_dir_or_file ... --out ref.json

  # speed and memory: N fresh processes per trace set, median wall time, max RSS
  python scripts/hta_reference.py TRACE --bench 3 --bench-mode load
  python scripts/hta_reference.py TRACE --bench 3 --bench-mode full

Environment: a virtual environment made from scripts/requirements-hta.txt.

A single trace file is analysed by giving HTA a temporary folder that holds one
symbolic link to it, because HTA's TraceAnalysis only accepts a folder.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

# HTA's analysis steps add columns to slices of data frames, which makes pandas
# warn on every call; the warnings say nothing about the numbers.
warnings.filterwarnings("ignore")

EXPECTED_HTA_VERSION = (0, 5, 0)
KERNEL_TYPES = ("COMMUNICATION", "COMPUTATION", "MEMORY")
# Short keys used in the JSON for each HTA kernel type.
SHORT_KEY = {"COMMUNICATION": "comm", "COMPUTATION": "comp", "MEMORY": "mem"}
US_TO_NS = 1000


def quiet_hta_logging() -> None:
    """HTA logs a warning line per parsing stage; keep stdout/stderr for our own output."""
    logging.getLogger("hta").setLevel(logging.ERROR)


def hta_version() -> tuple:
    from hta.version import __version_tuple__

    return tuple(__version_tuple__)


class TraceFolder:
    """A folder HTA can read: the given folder itself, or a temporary folder linking one file."""

    def __init__(self, path: str):
        self.source = os.path.abspath(path)
        self._tmp = None
        if os.path.isdir(self.source):
            self.folder = self.source
        elif os.path.isfile(self.source):
            if not (self.source.endswith(".gz") or self.source.endswith(".json")):
                raise SystemExit(f"{path}: HTA reads only files ending in .json or .gz")
            self._tmp = tempfile.TemporaryDirectory(prefix="hta-ref-")
            self.folder = self._tmp.name
            os.symlink(self.source, os.path.join(self.folder, os.path.basename(self.source)))
        else:
            raise SystemExit(f"{path}: no such file or folder")

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


def load(folder: str, include_last_profiler_step: bool):
    from hta.trace_analysis import TraceAnalysis

    return TraceAnalysis(trace_dir=folder, include_last_profiler_step=include_last_profiler_step)


def run_analyses(analysis):
    """The analyses whose cost the benchmark measures (HTA defaults, no plots)."""
    overlap_df = analysis.get_comm_comp_overlap(visualize=False)
    kernel_type_df, all_kernel_df = analysis.get_gpu_kernel_breakdown(visualize=False)
    return overlap_df, kernel_type_df, all_kernel_df


def step_window(analysis, rank: int) -> dict:
    """Describe the ProfilerStep window HTA's load step applied to one rank."""
    trace = analysis.t
    symbols = trace.symbol_table.get_sym_id_map()
    step_names = sorted(name for name in symbols if "ProfilerStep" in name)
    step_ids = {symbols[name] for name in step_names}
    df = trace.traces[rank]
    steps = df[df["name"].isin(step_ids)]
    table = trace.symbol_table.get_sym_table()
    return {
        # HTA filters only when the symbol table of all ranks together holds two or
        # more distinct names containing "ProfilerStep".
        "distinct_step_names_all_ranks": len(step_names),
        "filter_applied": len(step_names) >= 2,
        "steps_kept": [
            {
                "name": table[int(row.name)],
                "start_us_abs": int(row.ts) + int(trace.min_ts),
                "dur_us": int(row.dur),
            }
            for row in steps.sort_values("ts").itertuples()
        ],
    }


def per_rank_state_times(analysis, rank: int) -> dict:
    """HTA's kernel-type time split for one rank, in µs, keyed by HTA's state label.

    HTA's get_gpu_kernel_breakdown adds these rows up over all ranks; the per-rank
    rows come from the same HTA routine applied to one rank's events, selected and
    typed exactly as get_gpu_kernel_breakdown does.
    """
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.utils.utils import get_kernel_type

    table = analysis.t.symbol_table.get_sym_table()
    df = analysis.t.traces[rank]
    gpu_events = df[df["stream"].ne(-1)].copy()
    gpu_events["kernel_type"] = gpu_events["name"].apply(lambda sym: get_kernel_type(table[sym]))
    states = BreakdownAnalysis._get_gpu_kernel_type_time(gpu_events, ["COMPUTATION", "COMMUNICATION", "MEMORY"])
    counts = gpu_events["kernel_type"].value_counts().to_dict()
    dur_sums = gpu_events.groupby("kernel_type")["dur"].sum().to_dict()
    return {
        "states_us": {str(r.kernel_type): int(r.sum) for r in states.itertuples()},
        "event_counts": {str(k): int(v) for k, v in counts.items()},
        "dur_sum_us": {str(k): int(v) for k, v in dur_sums.items()},
    }


def hta_object(states_us: dict) -> dict:
    """Map HTA's state rows to the analyzer's `hta` object (see docs/hta-definitions.md).

    comm/comp/mem are the *exclusive* states (only that kernel type running);
    shares are of the union of all COMM/COMP/MEM kernel time, unrounded.
    """
    total_us = sum(states_us.values())
    out: dict = {}
    for kernel_type in KERNEL_TYPES:
        key = SHORT_KEY[kernel_type]
        value_us = states_us.get(kernel_type, 0)
        out[f"{key}_ns"] = value_us * US_TO_NS
    for kernel_type in KERNEL_TYPES:
        key = SHORT_KEY[kernel_type]
        value_us = states_us.get(kernel_type, 0)
        out[f"{key}_pct"] = 100.0 * value_us / total_us if total_us else None
    out["overlap_states_ns"] = {
        label: value_us * US_TO_NS for label, value_us in sorted(states_us.items()) if label not in KERNEL_TYPES
    }
    out["overlap_states_pct"] = {
        label: (100.0 * value_us / total_us if total_us else None)
        for label, value_us in sorted(states_us.items())
        if label not in KERNEL_TYPES
    }
    out["union_ns"] = total_us * US_TO_NS
    return out


def reference_for(path: str, include_last_profiler_step: bool) -> dict:
    """Run HTA on one trace set and collect the per-rank reference figures."""
    folder = TraceFolder(path)
    try:
        started = time.perf_counter()
        analysis = load(folder.folder, include_last_profiler_step)
        loaded = time.perf_counter()
        overlap_df, kernel_type_df, all_kernel_df = run_analyses(analysis)
        finished = time.perf_counter()
        temporal_df = analysis.get_temporal_breakdown(visualize=False)

        overlap_by_rank = {int(r.rank): float(r.comp_comm_overlap_pctg) for r in overlap_df.itertuples()}
        temporal_by_rank = {int(r["rank"]): r for _, r in temporal_df.iterrows()}
        ranks = []
        summed_states: dict = {}
        for rank in sorted(analysis.t.traces):
            detail = per_rank_state_times(analysis, rank)
            for label, value in detail["states_us"].items():
                summed_states[label] = summed_states.get(label, 0) + value
            # all_kernel_df holds, per rank and type, the top kernels plus an "others" row;
            # its "sum (us)" column adds up to the plain duration sum of that type.
            per_type_sum = (
                all_kernel_df[all_kernel_df["rank"] == rank].groupby("kernel_type")["sum (us)"].sum().to_dict()
            )
            temporal = temporal_by_rank[rank]
            overlap_pct = overlap_by_rank[rank]
            ranks.append(
                {
                    "rank": rank,
                    "file": os.path.basename(analysis.t.trace_files[rank]),
                    "comm_comp_overlap_pct": None if math.isnan(overlap_pct) else overlap_pct,
                    "hta": hta_object(detail["states_us"]),
                    "kernel_dur_sum_ns": {SHORT_KEY[k]: int(per_type_sum.get(k, 0)) * US_TO_NS for k in KERNEL_TYPES},
                    "gpu_event_counts_by_type": detail["event_counts"],
                    "gpu_event_dur_sum_us_by_type": detail["dur_sum_us"],
                    "temporal_breakdown": {
                        "idle_us": int(temporal["idle_time(us)"]),
                        "compute_us": int(temporal["compute_time(us)"]),
                        "non_compute_us": int(temporal["non_compute_time(us)"]),
                        "kernel_span_us": int(temporal["kernel_time(us)"]),
                        "idle_pct": float(temporal["idle_time_pctg"]),
                        "compute_pct": float(temporal["compute_time_pctg"]),
                        "non_compute_pct": float(temporal["non_compute_time_pctg"]),
                    },
                    "step_window": step_window(analysis, rank),
                }
            )

        all_ranks = [
            {"kernel_type": str(r.kernel_type), "sum_us": int(r.sum), "percentage": float(r.percentage)}
            for r in kernel_type_df.itertuples()
        ]
        # The per-rank rows must add up to what HTA reports for all ranks together.
        reported = {row["kernel_type"]: row["sum_us"] for row in all_ranks}
        if reported != summed_states:
            raise SystemExit(f"{path}: per-rank states {summed_states} differ from HTA's total {reported}")
        return {
            "trace": path,
            "ranks": ranks,
            "all_ranks_kernel_type_breakdown": all_ranks,
            "seconds": {"load": loaded - started, "overlap_and_breakdown": finished - loaded},
        }
    finally:
        folder.close()


# ---------------------------------------------------------------------------
# Benchmark mode: each run is a fresh interpreter so that peak RSS is per run.


def child_main(path: str, mode: str, include_last_profiler_step: bool) -> None:
    """Measure one run inside a fresh process and print one JSON line."""
    quiet_hta_logging()
    import hta.trace_analysis  # noqa: F401  (import cost is not part of the measured span)

    folder = TraceFolder(path)
    try:
        cpu_before = cpu_seconds()
        started = time.perf_counter()
        analysis = load(folder.folder, include_last_profiler_step)
        if mode == "full":
            run_analyses(analysis)
        elapsed = time.perf_counter() - started
        cpu_used = cpu_seconds() - cpu_before
    finally:
        folder.close()
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(
        json.dumps(
            {"seconds": elapsed, "cpu_seconds": cpu_used, "self_max_rss_kib": own, "worker_max_rss_kib": workers}
        )
    )


def cpu_seconds() -> float:
    """User + system CPU time of this process and its finished parsing workers.

    Reported next to wall time because wall time on a shared machine depends on
    what else runs; CPU time much less so.
    """
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def bench(paths: list, runs: int, mode: str, include_last_profiler_step: bool) -> list:
    results = []
    for path in paths:
        samples = []
        for _ in range(runs):
            cmd = [sys.executable, os.path.abspath(__file__), path, "--child", mode]
            if include_last_profiler_step:
                cmd.append("--include-last-profiler-step")
            started = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            process_seconds = time.perf_counter() - started
            if done.returncode != 0:
                raise SystemExit(f"{path}: HTA run failed: {done.stderr.strip().splitlines()[-1:]}")
            sample = json.loads(done.stdout.strip().splitlines()[-1])
            sample["process_seconds"] = process_seconds
            samples.append(sample)
        peak_kib = [max(s["self_max_rss_kib"], s["worker_max_rss_kib"]) for s in samples]
        line = {
            "tool": "hta",
            "hta_version": ".".join(map(str, hta_version())),
            "trace": path,
            "mode": mode,
            "runs": runs,
            # Wall time of load (+ analyses) inside the process, imports excluded.
            "median_seconds": statistics.median(s["seconds"] for s in samples),
            # Wall time of the whole process: interpreter start, imports, load (+ analyses).
            "median_process_seconds": statistics.median(s["process_seconds"] for s in samples),
            # CPU time (user + system, workers included) of load (+ analyses).
            "median_cpu_seconds": statistics.median(s["cpu_seconds"] for s in samples),
            # Largest resident set of one process (the main one or a parsing worker).
            "max_rss_mib": max(peak_kib) / 1024,
            "main_process_max_rss_mib": max(s["self_max_rss_kib"] for s in samples) / 1024,
            "samples": samples,
        }
        print(json.dumps(line), flush=True)
        results.append(line)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", help="trace folder(s) or single trace file(s)")
    parser.add_argument("--out", help="write the reference JSON here")
    parser.add_argument(
        "--include-last-profiler-step",
        action="store_true",
        help="keep the last ProfilerStep (HTA's default drops it)",
    )
    parser.add_argument("--bench", type=int, metavar="N", help="time N fresh runs per trace instead")
    parser.add_argument("--bench-mode", choices=("load", "full"), default="full")
    parser.add_argument("--child", choices=("load", "full"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        child_main(args.traces[0], args.child, args.include_last_profiler_step)
        return

    quiet_hta_logging()
    version = hta_version()
    if version != EXPECTED_HTA_VERSION:
        raise SystemExit(f"HTA {version} installed; these references need {EXPECTED_HTA_VERSION}")

    if args.bench:
        bench(args.traces, args.bench, args.bench_mode, args.include_last_profiler_step)
        return

    import pandas

    document = {
        "producer": "scripts/hta_reference.py",
        "hta_version": ".".join(map(str, version)),
        "pandas_version": pandas.__version__,
        "options": {
            "include_last_profiler_step": args.include_last_profiler_step,
            "get_gpu_kernel_breakdown": "defaults (include_memory_kernels=True)",
            "parser": "HTA default (JSON backend, ns rounding on)",
        },
        "units": "ns fields are HTA's integer µs times 1000; pct fields are percent",
        "trace_sets": [reference_for(path, args.include_last_profiler_step) for path in args.traces],
    }
    text = json.dumps(document, indent=1, sort_keys=False)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
