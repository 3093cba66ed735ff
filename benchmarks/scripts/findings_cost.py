#!/usr/bin/env python3
"""What the findings add to `analyzer report`: `report --format json` against `report --format json --no-findings`
on the same traces with the same build, interleaved in one sitting.

    python3 benchmarks/scripts/findings_cost.py --analyzer target/release/analyzer --rounds 7 \
        --trace tp2_nsys=sample-traces/tp2_nsys.sqlite.gz --trace k200k=/tmp/k200k.sqlite \
        [--baseline target/release/analyzer.before] [--deadline-s 900] --out benchmarks/results/findings-cost-2core.json

Each round runs every (trace, mode) once; within a trace the two modes alternate which goes first from round to
round. With `--baseline OTHER_ANALYZER` the same runs of that build are interleaved with them (the four runs of a
trace in a round rotate their order from round to round), and per trace the ratio build ÷ baseline of each round's
runs with findings is given, and whether the two builds printed the same bytes. One process per run: wall time, user + system CPU time and peak resident memory of the child (the same
measurement as `report_speed.py`, whose `run_once` this uses). Per trace and mode the median, min and max of each
figure; per trace the ratio with ÷ without of each round's pair (median, min, max), so that a slow moment of the
machine lands on both sides of a ratio. `--deadline-s` stops starting rounds after that many seconds and still writes
what was measured.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_speed import run_once  # noqa: E402


MODES = {"with": [], "without": ["--no-findings"]}


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(samples):
    out = []
    for trace in sorted({s["trace"] for s in samples}):
        mine = [s for s in samples if s["trace"] == trace and s["build"] == "build"]
        entry = summarize_build(trace, mine)
        theirs = [s for s in samples if s["trace"] == trace and s["build"] == "baseline"]
        if theirs:
            entry["baseline"] = summarize_build(trace, theirs)
            pairs = {}
            for r in mine + theirs:
                if r["mode"] == "with" and r["exit_code"] == 0:
                    pairs.setdefault(r["round"], {})[r["build"]] = r
            for field in ("wall_s", "cpu_s"):
                ratios = [p["build"][field] / p["baseline"][field] for p in pairs.values()
                          if len(p) == 2 and p["baseline"][field] > 0]
                if ratios:
                    entry[f"with_{field}_ratio_build_over_baseline"] = spread(ratios)
            entry["same_output_as_baseline"] = all(
                p["build"]["stdout_sha256"] == p["baseline"]["stdout_sha256"] for p in pairs.values() if len(p) == 2)
        out.append(entry)
    return out


def summarize_build(trace, samples):
    rows = [s for s in samples if s["exit_code"] == 0]
    entry = {"trace": trace}
    for mode in MODES:
        runs = [r for r in rows if r["mode"] == mode]
        if runs:
            entry[mode] = {"runs": len(runs)}
            for field in ("wall_s", "cpu_s", "peak_rss_mib"):
                entry[mode][field] = spread([r[field] for r in runs])
    pairs = {}
    for r in rows:
        pairs.setdefault(r["round"], {})[r["mode"]] = r
    for field in ("wall_s", "cpu_s"):
        ratios = [p["with"][field] / p["without"][field] for p in pairs.values()
                  if len(p) == 2 and p["without"][field] > 0]
        if ratios:
            entry[f"{field}_ratio_with_over_without"] = spread(ratios)
    return entry


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--analyzer", required=True)
    parser.add_argument("--baseline", default=None, help="another build, run interleaved with --analyzer")
    parser.add_argument("--trace", action="append", required=True, help="NAME=PATH")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--deadline-s", type=float, default=None)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    traces = [t.split("=", 1) for t in args.trace]
    start = time.monotonic()
    samples = []
    for round_index in range(args.rounds):
        if args.deadline_s is not None and time.monotonic() - start > args.deadline_s:
            print(f"deadline reached after {round_index} rounds", file=sys.stderr)
            break
        for trace_index, (name, path) in enumerate(traces):
            order = list(MODES) if (round_index + trace_index) % 2 == 0 else list(reversed(MODES))
            runs = [("build", args.analyzer, mode) for mode in order]
            if args.baseline:
                runs += [("baseline", args.baseline, mode) for mode in order]
                shift = (round_index + trace_index) % len(runs)
                runs = runs[shift:] + runs[:shift]
            for build, analyzer, mode in runs:
                argv = [analyzer, "report", "--format", "json", *MODES[mode], path]
                sample = run_once(argv)
                sample.update({"round": round_index, "trace": name, "mode": mode, "build": build})
                samples.append(sample)
                print(f"round {round_index} {name} {build} {mode}: {sample['wall_s']:.3f} s wall, "
                      f"{sample['cpu_s']:.3f} s CPU, {sample['peak_rss_mib']:.0f} MiB, exit {sample['exit_code']}",
                      file=sys.stderr)
    summary = summarize(samples)
    result = {
        "analyzer": args.analyzer,
        "baseline": args.baseline,
        "cpus": os.cpu_count(),
        "load_average_at_end": os.getloadavg(),
        "summary": summary,
        "samples": samples,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    for entry in summary:
        line = [entry["trace"]]
        for mode in MODES:
            if mode in entry:
                w = entry[mode]["wall_s"]
                line.append(f"{mode} {w['median']:.3f} s ({w['min']:.3f}-{w['max']:.3f}) n={entry[mode]['runs']}")
        for field in ("wall_s", "cpu_s"):
            ratio = entry.get(f"{field}_ratio_with_over_without")
            if ratio:
                line.append(f"{field} ratio {ratio['median']:.3f} ({ratio['min']:.3f}-{ratio['max']:.3f})")
        if "baseline" in entry:
            for field in ("wall_s", "cpu_s"):
                r = entry.get(f"with_{field}_ratio_build_over_baseline")
                if r:
                    line.append(f"with {field} build/baseline {r['median']:.3f} ({r['min']:.3f}-{r['max']:.3f})")
            base = entry["baseline"]
            for mode in MODES:
                if mode in base:
                    w = base[mode]["wall_s"]
                    line.append(f"baseline {mode} {w['median']:.3f} s ({w['min']:.3f}-{w['max']:.3f})")
            line.append(f"same output {entry['same_output_as_baseline']}")
        print("  ".join(line))


if __name__ == "__main__":
    main()
