#!/usr/bin/env python3
"""Analyses a many-rank job with `shardscope.dask` on 1, 2, 4 and 8 local Dask workers: wall time and peak memory.

Each configuration starts its own `LocalCluster` (single-threaded worker processes) and analyses the job twice on
it: first on fresh workers (which import the package), then warm; cluster start-up is timed apart. Each worker's
peak resident memory (`VmHWM`, reset when the cluster has started) covers both analyses. The
configurations are run interleaved, `--repeats` rounds of all of them, and the single-process package
(`shardscope.report_json`, the analysis of `analyzer report` in this process) is measured in the same rounds. Every
Dask result is checked to be the same JSON as the single-process one.

    cargo run --release -p shardscope-io --example gen_fleet_job -- --ranks 32 --out /tmp/fleet32
    python3 benchmarks/scripts/fleet_bench.py --job /tmp/fleet32 --workers 1,2,4,8 --repeats 3 --stages
"""

import argparse
import hashlib
import json
import os
import resource
import statistics
import sys
import time


def reset_peak():
    """Resets this process's resident-memory high-water mark (Linux: `5` to `/proc/self/clear_refs`), so that a
    worker forked from a larger process reports its own peak."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mib():
    """The high-water mark of resident memory since the last reset (`VmHWM`), else since the process began."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def stage_times(job, buckets=2):
    """The Dask path's native steps run in this process one after the other (no scheduling, no transfers), in
    seconds, with the size of what they exchange."""
    from shardscope import Options, _native
    from shardscope import dask as shardscope_dask

    options = Options().to_json()
    files = shardscope_dask.expand_inputs([job])
    times = {}
    start = time.perf_counter()
    pieces = [trace for path in files for trace in _native.trace_pieces(path, options, buckets)]
    times["parts_s"] = time.perf_counter() - start
    headers = [header for _, header, _ in pieces]
    ranks = _native.rank_entries(headers)
    firsts, first = [], 0
    counts = {}
    for entry in json.loads(ranks):
        counts[entry["trace"]] = counts.get(entry["trace"], 0) + 1
    for index in range(len(pieces)):
        firsts.append(first)
        first += counts.get(index, 0)
    columns = [[(f, rows[b]) for f, (_, _, rows) in zip(firsts, pieces)] for b in range(buckets)]
    start = time.perf_counter()
    offsets = []
    if _native.hosts_differ(headers):
        offsets = _native.alignment_offsets(first, [_native.bucket_differences(c) for c in columns])
    times["clocks_s"] = time.perf_counter() - start
    start = time.perf_counter()
    group_of_trace = [0] * len(pieces)
    matched = [_native.match_bucket(c, ranks, offsets, False, group_of_trace, 1) for c in columns]
    times["match_s"] = time.perf_counter() - start
    start = time.perf_counter()
    finished = _native.finish_traces([(t, part) for t, (part, _, _) in enumerate(pieces)], ranks,
                                     _native.job_has_steps(headers), [shares[0] for _, shares in matched])
    _native.assemble(headers, finished, [instances for instances, _ in matched], options)
    times["assemble_s"] = time.perf_counter() - start
    times["part_mib"] = sum(len(part) for part, _, _ in pieces) / 2**20
    times["rows_mib"] = sum(len(b) for _, _, rows in pieces for b in rows) / 2**20
    return times


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", required=True, help="folder of per-rank traces (gen_fleet_job)")
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write every sample here")
    parser.add_argument("--stages", action="store_true", help="also time the native steps alone, in this process")
    parser.add_argument("--no-single", action="store_true",
                        help="skip the single-process analysis (a large job): the Dask reports are then checked "
                             "against each other")
    parser.add_argument("--chunks", type=int, help="reading tasks (default: shardscope.dask's)")
    parser.add_argument("--buckets", type=int, help="keyed reductions (default: shardscope.dask's)")
    parser.add_argument("--memory-limit", default="0",
                        help="each worker's Dask memory limit, e.g. 4GiB (spill to disk past 60 %%); 0: none")
    parser.add_argument("--cold-only", action="store_true",
                        help="analyse once per cluster, on fresh workers (a large job): no warm analysis")
    args = parser.parse_args()

    import shardscope
    from distributed import Client, LocalCluster
    from shardscope import dask as shardscope_dask

    counts = [int(w) for w in args.workers.split(",")]
    samples = {"single": [], "stages": [], **{w: [] for w in counts}}
    expected = None
    for round_index in range(args.repeats):
        if not args.no_single:
            start = time.perf_counter()
            text = shardscope.report_json(args.job)
            samples["single"].append({"analysis_s": time.perf_counter() - start, "peak_rss_mib": peak_rss_mib(),
                                      "report_sha256": hashlib.sha256(text.encode()).hexdigest()})
            expected = expected or text
        if args.stages:
            samples["stages"].append(stage_times(args.job))
        for workers in counts:
            start = time.perf_counter()
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                                   memory_limit=args.memory_limit if args.memory_limit != "0" else 0)
            client = Client(cluster)
            started = time.perf_counter()
            client.run(reset_peak)
            idle = client.run(peak_rss_mib)
            # The first analysis on fresh workers includes importing the package there; the second is warm.
            sizing = {"chunks": args.chunks, "buckets": args.buckets}
            first = shardscope_dask.analyze_json([args.job], client=client, **sizing)
            first_done = time.perf_counter()
            result = first if args.cold_only else shardscope_dask.analyze_json([args.job], client=client, **sizing)
            done = time.perf_counter()
            expected = expected or first
            peaks = client.run(peak_rss_mib)
            client.close()
            cluster.close()
            if result != expected or first != expected:
                print(f"workers={workers}: the Dask report differs from the "
                      f"{'first Dask' if args.no_single else 'single-process'} one", file=sys.stderr)
                return 1
            samples[workers].append({
                # Compared across invocations when one command cannot run every configuration of a large job.
                "report_sha256": hashlib.sha256(first.encode()).hexdigest(),
                "start_s": started - start,
                "cold_s": first_done - started,
                "analysis_s": None if args.cold_only else done - first_done,
                "idle_rss_mib": max(idle.values()),
                "peak_rss_mib": max(peaks.values()),
            })
            print(f"round {round_index}: {workers} workers: cold {first_done - started:.2f} s, warm "
                  f"{'–' if args.cold_only else f'{done - first_done:.2f}'} s, peak {max(peaks.values()):.0f} MiB "
                  "per worker", file=sys.stderr, flush=True)
    ranks = len(json.loads(expected)["ranks"])
    print(f"job: {args.job} ({ranks} ranks), {os.cpu_count()} CPUs, {args.repeats} rounds; median (min–max)")
    print("| configuration | analysis, warm s | analysis, cold workers s | cluster start s | worker RSS idle, MiB "
          "| worker peak RSS, MiB |")
    print("| --- | --- | --- | --- | --- | --- |")
    single = samples["single"]
    if single:
        print(f"| one process (`shardscope.report_json`) | {spread([s['analysis_s'] for s in single])} | – | – | – | – |")
    kernels = sum(r.get("kernel_count", 0) for r in json.loads(expected)["ranks"])
    print(f"kernels in the report: {kernels}")
    for workers in counts:
        rows = samples[workers]
        print(f"| Dask, {workers} worker{'s' if workers > 1 else ''} | {spread([r['analysis_s'] for r in rows])} | "
              f"{spread([r['cold_s'] for r in rows])} | {spread([r['start_s'] for r in rows])} | "
              f"{spread([r['idle_rss_mib'] for r in rows])} | {spread([r['peak_rss_mib'] for r in rows])} |")
    if samples["stages"]:
        stages = samples["stages"]
        print("native steps alone, one process: " + ", ".join(
            f"{key[:-2]} {spread([s[key] for s in stages])} s" for key in ("parts_s", "clocks_s", "match_s", "assemble_s")
        ) + f"; parts {stages[0]['part_mib']:.1f} MiB, bucketed rows {stages[0]['rows_mib']:.1f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(k): v for k, v in samples.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
