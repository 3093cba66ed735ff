#!/usr/bin/env python3
"""Side-by-side speed and memory: `analyzer report` against Holistic Trace Analysis 0.5.0.

Both tools run as fresh processes, interleaved (HTA, ours, HTA, ours, ...) so that machine noise hits both
alike. For each trace set the script reports the median wall time of the whole process and the largest
resident set size (from wait4's rusage, per child), and the ratios.

HTA does the same analyses as the report's HTA-compatible part: load the traces, communication-computation
overlap, kernel-type breakdown (`scripts/hta_reference.py --child full`).

Usage:
  python3 scripts/bench_vs_hta.py --hta-python /tmp/hta/bin/python --analyzer target/release/analyzer \
      --runs 5 ../shared/traces/kineto/df_index_resolver.json.gz ../shared/traces/kineto/dlrm_8rank
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_measured(cmd: list[str]) -> tuple[float, float]:
    """Runs cmd with output discarded; returns (wall seconds, max RSS MiB of that child)."""
    start = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    stderr = child.stderr.read().decode(errors="replace") if child.stderr else ""
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {child.returncode}: {stderr.strip()[:300]}")
    return wall, usage.ru_maxrss / 1024.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--hta-python", required=True, help="python of a venv with scripts/requirements-hta.txt")
    parser.add_argument("--analyzer", default="target/release/analyzer")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    results = []
    for trace in args.traces:
        hta_cmd = [args.hta_python, str(HERE / "hta_reference.py"), trace, "--child", "full"]
        ours_cmd = [args.analyzer, "report", "--format", "json", trace]
        samples = {"hta": [], "ours": []}
        for _ in range(args.runs):
            samples["hta"].append(run_measured(hta_cmd))
            samples["ours"].append(run_measured(ours_cmd))
        row = {"trace": trace, "runs": args.runs}
        for tool, runs in samples.items():
            row[f"{tool}_median_s"] = statistics.median(w for w, _ in runs)
            row[f"{tool}_max_rss_mib"] = max(m for _, m in runs)
            row[f"{tool}_wall_s"] = [round(w, 4) for w, _ in runs]
        row["speedup"] = row["hta_median_s"] / row["ours_median_s"]
        row["memory_ratio"] = row["ours_max_rss_mib"] / row["hta_max_rss_mib"]
        results.append(row)
        print(
            f"{trace}: HTA {row['hta_median_s']:.3f} s {row['hta_max_rss_mib']:.1f} MiB | "
            f"ours {row['ours_median_s']:.4f} s {row['ours_max_rss_mib']:.1f} MiB | "
            f"{row['speedup']:.1f}x faster, {row['memory_ratio']:.3f} of HTA's memory",
            flush=True,
        )
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
