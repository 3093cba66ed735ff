#!/usr/bin/env python3
"""A/B of how `shardscope.dask` splits the reading of the input files into tasks: one task per file against the
default (contiguous chunks, four per worker), on the same warm `LocalCluster`, in interleaved rounds (the order
swapped every round). Prints median (min–max) seconds per configuration and whether every report was the same JSON.

    cargo run --release -p shardscope-io --example gen_fleet_job -- --ranks 512 --steps 10 --layers 16 --out /tmp/fleet512s
    python3 benchmarks/scripts/dask_chunks_ab.py --job /tmp/fleet512s --buckets 16 --workers 1,2 --rounds 4
"""

import argparse
import statistics
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", required=True, help="folder of per-rank traces (gen_fleet_job)")
    parser.add_argument("--buckets", type=int, default=None, help="keyed reductions (default: 2 per worker)")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()

    from distributed import Client, LocalCluster
    from shardscope import dask as shardscope_dask

    files = len(shardscope_dask.expand_inputs([args.job]))
    ways = [("one task per file", files), ("default chunks", None)]
    for workers in (int(w) for w in args.workers.split(",")):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                               memory_limit=0)
        client = Client(cluster)
        # Once to import the package on the workers, untimed.
        reports = {shardscope_dask.analyze_json([args.job], client=client, buckets=args.buckets)}
        seconds = {name: [] for name, _ in ways}
        for round_index in range(args.rounds):
            for name, chunks in ways if round_index % 2 == 0 else ways[::-1]:
                start = time.perf_counter()
                reports.add(shardscope_dask.analyze_json([args.job], client=client, buckets=args.buckets, chunks=chunks))
                seconds[name].append(time.perf_counter() - start)
        client.close()
        cluster.close()
        figures = ", ".join(f"{name} {statistics.median(v):.2f} s ({min(v):.2f}–{max(v):.2f})"
                            for name, v in seconds.items())
        print(f"{workers} worker(s), {files} files: {figures}; "
              f"{'every report the same' if len(reports) == 1 else 'REPORTS DIFFER'}")
        if len(reports) != 1:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
