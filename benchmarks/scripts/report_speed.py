#!/usr/bin/env python3
"""Wall time, CPU time and peak memory of `analyzer report` and `analyzer kern-sum` (and, when given,
`nsys stats --report cuda_gpu_kern_sum`) on generated multi-rank traces, for two or more analyzer builds
interleaved in one sitting.

    python3 benchmarks/scripts/report_speed.py --rounds 5 \
        --build before=/path/to/old/analyzer --build after=target/release/analyzer \
        --trace k1m=/tmp/k1000000.sqlite [--nsys /path/to/nsys] [--deadline-s 280] --out results.json

or, generating the traces first (needs only the `gen_large_nsys` binary, no cargo):

    python3 benchmarks/scripts/report_speed.py --rounds 3 --build after=./analyzer \
        --gen ./gen_large_nsys --sizes 1000000,10000000 --ranks 8 --workdir /tmp/traces --out results.json

`--gen` writes `k<size>.sqlite` (`gen_large_nsys --kernels SIZE --ranks RANKS`) into `--workdir` unless it is there
already, and times each as a trace named `k<size>`. `--fleet-gen` with `--fleet RANKSxSTEPS` writes the many-rank
Kineto job `fleet<RANKS>x<STEPS>/` (`gen_fleet_job --layers 64`; 512x1040 is the 102.8 M-kernel job), timed as a
folder. `--commands` picks what runs per trace: `report`, `kern-sum`, and `report-streaming` (`report --streaming
on`, one file at a time: the one-process path for a job larger than memory) and `report-skip1` (`report --skip-steps 1`:
the first step left out as warm-up, so that every rank also makes the figures of its steady state).

Each round runs every (trace, command, build) once; the builds' order rotates from round to round so that
neither always runs first after the other. One process per run: its wall time, user and system CPU time (each, and summed)
(`cores busy` = CPU / wall), peak resident memory (`ru_maxrss` of the child, from `wait4`) and the SHA-256 of
what it printed (the builds must print the same bytes). `--deadline-s` stops starting runs after that many seconds and still writes what was measured.
The summary (per trace, command and build: median, min and max of each figure) is printed and written with the
samples to `--out`.
"""

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def run_once(argv):
    """Runs argv; returns wall seconds, CPU seconds, peak RSS in MiB, exit code and the SHA-256 of its stdout (so
    that the builds' outputs can be compared byte for byte without keeping them)."""
    digest = hashlib.sha256()
    with tempfile.TemporaryFile() as stderr:
        start = time.monotonic()
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr)
        for chunk in iter(lambda: child.stdout.read(1 << 20), b""):
            digest.update(chunk)
        _, status, usage = os.wait4(child.pid, 0)
        wall_s = time.monotonic() - start
        exit_code = os.waitstatus_to_exitcode(status)
        stderr.seek(0)
        stderr_text = stderr.read().decode(errors="replace")
    return {
        "wall_s": wall_s,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "user_s": usage.ru_utime,
        "system_s": usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024.0,
        "exit_code": exit_code,
        "stdout_sha256": digest.hexdigest(),
        "stderr_tail": stderr_text[-300:] if exit_code else "",
    }


def commands(build_path, trace_path):
    return {
        "report": [build_path, "report", "--format", "json", trace_path],
        "report-streaming": [build_path, "report", "--streaming", "on", "--format", "json", trace_path],
        "report-skip1": [build_path, "report", "--skip-steps", "1", "--format", "json", trace_path],
        "kern-sum": [build_path, "kern-sum", "--format", "csv", trace_path],
    }


def size_bytes(path):
    """A file's size, or the sum of a folder's files."""
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def summarize(samples):
    groups = {}
    for s in samples:
        if s["exit_code"] != 0:
            continue
        groups.setdefault((s["trace"], s["command"], s["build"]), []).append(s)
    out = []
    for (trace, command, build), runs in sorted(groups.items()):
        row = {"trace": trace, "command": command, "build": build, "runs": len(runs)}
        for field in ("wall_s", "cpu_s", "user_s", "system_s", "peak_rss_mib"):
            values = [r[field] for r in runs if field in r]
            if not values:
                continue
            row[field] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
        cores = [r["cpu_s"] / r["wall_s"] for r in runs if r["wall_s"] > 0]
        row["cores_busy"] = {"median": statistics.median(cores), "min": min(cores), "max": max(cores)}
        row["stdout_sha256"] = sorted({r["stdout_sha256"] for r in runs})
        out.append(row)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--build", action="append", required=True, help="NAME=PATH of an analyzer binary")
    parser.add_argument("--trace", action="append", default=[], help="NAME=PATH of a trace")
    parser.add_argument("--gen", help="gen_large_nsys binary: generate the --sizes traces in --workdir")
    parser.add_argument("--sizes", default="1000000", help="kernels per generated trace, comma-separated")
    parser.add_argument("--ranks", type=int, default=8, help="ranks of each generated trace")
    parser.add_argument("--workdir", default=".", help="where the generated traces go")
    parser.add_argument("--nsys", help="nsys binary: also time `nsys stats --report cuda_gpu_kern_sum` per trace "
                        "(default: `nsys` on PATH, if any)")
    parser.add_argument("--no-nsys", action="store_true", help="do not time nsys stats even if it is on PATH")
    parser.add_argument("--nsys-rounds", type=int, default=None, help="rounds that run nsys stats (default: all)")
    parser.add_argument("--fleet-gen", help="gen_fleet_job binary: generate the --fleet jobs in --workdir")
    parser.add_argument("--fleet", default="", help="RANKSxSTEPS of generated Kineto jobs, comma-separated")
    parser.add_argument("--commands", default="report,kern-sum",
                        help="comma-separated: report, kern-sum, report-streaming, report-skip1")
    parser.add_argument("--deadline-s", type=float, default=None)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.no_nsys:
        args.nsys = None
    elif args.nsys is None:
        args.nsys = shutil.which("nsys")
    builds = [b.split("=", 1) for b in args.build]
    traces = [t.split("=", 1) for t in args.trace]
    generated = []
    if args.gen:
        os.makedirs(args.workdir, exist_ok=True)
        for size in [int(s) for s in args.sizes.split(",") if s]:
            path = os.path.join(args.workdir, f"k{size}.sqlite")
            if not os.path.exists(path):
                start = time.monotonic()
                subprocess.run([args.gen, "--kernels", str(size), "--ranks", str(args.ranks), "-o", path], check=True)
                print(f"generated {path} in {time.monotonic() - start:.1f} s", flush=True)
            traces.append((f"k{size}", path))
    if args.fleet_gen:
        for shape in [f for f in args.fleet.split(",") if f]:
            ranks, steps = shape.split("x")
            path = os.path.join(args.workdir, f"fleet{ranks}x{steps}")
            if not os.path.exists(path):
                start = time.monotonic()
                subprocess.run([args.fleet_gen, "--ranks", ranks, "--steps", steps, "--layers", "64", "--out", path,
                                "--jobs", str(len(os.sched_getaffinity(0)))], check=True)
                print(f"generated {path} in {time.monotonic() - start:.1f} s", flush=True)
            traces.append((f"fleet{ranks}x{steps}", path))
    if not traces:
        parser.error("give --trace, --gen or --fleet-gen")
    wanted = [c for c in args.commands.split(",") if c]
    unknown = [c for c in wanted if c not in commands("", "")]
    if unknown or not wanted:
        parser.error(f"--commands: unknown {unknown}")
    for name, path in traces:
        generated.append({"trace": name, "path": path, "bytes": size_bytes(path)})
    began = time.monotonic()
    samples = []
    stopped = None

    def write():
        result = {"machine": os.uname().nodename, "cpus": os.cpu_count(),
                  "affinity": sorted(os.sched_getaffinity(0)), "stopped_early": stopped, "traces": generated,
                  "nsys": args.nsys,
                  "summary": summarize(samples), "samples": samples}
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    for round_index in range(args.rounds):
        order = builds[round_index % len(builds):] + builds[: round_index % len(builds)]
        for trace_name, trace_path in traces:
            planned = []
            for command in wanted:
                for build_name, build_path in order:
                    planned.append((command, build_name, commands(build_path, trace_path)[command]))
            nsys_rounds = args.nsys_rounds if args.nsys_rounds is not None else args.rounds
            if args.nsys and "kern-sum" in wanted and round_index < nsys_rounds:
                argv = [args.nsys, "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv", trace_path]
                planned.append(("kern-sum", "nsys stats", argv))
            for command, build_name, argv in planned:
                if args.deadline_s is not None and time.monotonic() - began > args.deadline_s:
                    stopped = f"deadline reached in round {round_index + 1}"
                    break
                sample = run_once(argv)
                sample.update(round=round_index + 1, trace=trace_name, command=command, build=build_name)
                samples.append(sample)
                print(json.dumps(sample), flush=True)
                write()
            if stopped:
                break
        if stopped:
            break
    write()
    for row in summarize(samples):
        w, c, m = row["wall_s"], row["cores_busy"], row["peak_rss_mib"]
        print(f"{row['trace']:>6} {row['command']:>16} {row['build']:>10}: {w['median']:.2f} s "
              f"({w['min']:.2f}-{w['max']:.2f}), cores {c['median']:.1f}, peak {m['median']:.0f} MiB, n={row['runs']}"
              + (f", user {row['user_s']['median']:.2f} s, system {row['system_s']['median']:.2f} s"
                 if "user_s" in row else ""))
    failed = [s for s in samples if s["exit_code"] != 0]
    for s in failed:
        print(f"FAILED: {s['trace']} {s['command']} {s['build']}: exit {s['exit_code']}: {s['stderr_tail']}",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
