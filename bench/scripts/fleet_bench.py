#!/usr/bin/env python3
"""Analyses a many-rank job with `shardscope.dask` on 1, 2, 4 and 8 local Dask workers: wall time and peak memory.

Each configuration starts its own `LocalCluster` (single-threaded worker processes), so that each worker's peak
resident memory (`ru_maxrss`) belongs to that run; cluster start-up is timed apart from the analysis. The
configurations are run interleaved, `--repeats` rounds of all of them, and the single-process package
(`shardscope.report_json`, the analysis of `analyzer report` in this process) is measured in the same rounds. Every
Dask result is checked to be the same JSON as the single-process one.

    python3 bench/scripts/make_fleet_job.py --ranks 32 --out /tmp/fleet32
    python3 bench/scripts/fleet_bench.py --job /tmp/fleet32 --workers 1,2,4,8 --repeats 3
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time


def peak_rss_mib():
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def spread(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", required=True, help="folder of per-rank traces (make_fleet_job.py)")
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write every sample here")
    args = parser.parse_args()

    import shardscope
    from distributed import Client, LocalCluster
    from shardscope import dask as shardscope_dask

    counts = [int(w) for w in args.workers.split(",")]
    samples = {"single": [], **{w: [] for w in counts}}
    expected = None
    for round_index in range(args.repeats):
        start = time.perf_counter()
        text = shardscope.report_json(args.job)
        samples["single"].append({"analysis_s": time.perf_counter() - start})
        expected = expected or text
        for workers in counts:
            start = time.perf_counter()
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                                   memory_limit=0)
            client = Client(cluster)
            started = time.perf_counter()
            idle = client.run(peak_rss_mib)
            result = shardscope_dask.analyze([args.job], client=client)
            done = time.perf_counter()
            peaks = client.run(peak_rss_mib)
            client.close()
            cluster.close()
            if result != expected:
                print(f"workers={workers}: the Dask report differs from the single-process one", file=sys.stderr)
                return 1
            samples[workers].append({
                "start_s": started - start,
                "analysis_s": done - started,
                "idle_rss_mib": max(idle.values()),
                "peak_rss_mib": max(peaks.values()),
            })
            print(f"round {round_index}: {workers} workers: {done - started:.2f} s, "
                  f"peak {max(peaks.values()):.0f} MiB per worker", file=sys.stderr)
    ranks = len(json.loads(expected)["ranks"])
    print(f"job: {args.job} ({ranks} ranks), {os.cpu_count()} CPUs, {args.repeats} rounds; median (min–max)")
    print("| configuration | analysis s | cluster start s | worker RSS before, MiB | worker peak RSS, MiB |")
    print("| --- | --- | --- | --- | --- |")
    single = samples["single"]
    print(f"| one process (`shardscope.report_json`) | {spread([s['analysis_s'] for s in single])} | – | – | – |")
    for workers in counts:
        rows = samples[workers]
        print(f"| Dask, {workers} worker{'s' if workers > 1 else ''} | {spread([r['analysis_s'] for r in rows])} | "
              f"{spread([r['start_s'] for r in rows])} | {spread([r['idle_rss_mib'] for r in rows])} | "
              f"{spread([r['peak_rss_mib'] for r in rows])} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(k): v for k, v in samples.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
