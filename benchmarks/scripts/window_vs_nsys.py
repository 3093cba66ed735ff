#!/usr/bin/env python3
"""Kernels kept by a window capture against Nsight Systems' on the same program: counts per kernel name.

    python3 benchmarks/scripts/window_vs_nsys.py OURS.sqlite NSYS.sqlite [NSYS2.sqlite ...] [--label NAME] [--out F]

Several Nsight Systems files (one per window, as `--capture-range-end=repeat` writes them) are summed. All are in Nsight Systems' export schema (`CUPTI_ACTIVITY_KIND_KERNEL`, names in `StringIds`). Prints the
total kernels of each, how many distinct names, every name whose count differs, and the graph launches recorded whole
(graph level); appends one JSON line to
`--out` when given. Exit status 0 when every name's count is equal, 1 when any differs, 2 when a file cannot be
read.
"""

import argparse
import collections
import json
import os
import sqlite3
import sys


def kernel_counts(path):
    """Kernel launches per demangled name (the short name where no demangled one is stored)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT coalesce(d.value, s.value), count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "LEFT JOIN StringIds d ON d.id = k.demangledName LEFT JOIN StringIds s ON s.id = k.shortName "
            "GROUP BY 1"
        ).fetchall()
    finally:
        con.close()
    return collections.Counter({name: count for name, count in rows})


def graph_launches(path):
    """CUDA graph launches recorded whole (`CUPTI_ACTIVITY_KIND_GRAPH_TRACE`; 0 where the table is absent)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        present = con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_GRAPH_TRACE'")
        if present.fetchone()[0] == 0:
            return 0
        return con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE").fetchone()[0]
    finally:
        con.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ours")
    parser.add_argument("nsys", nargs="+")
    parser.add_argument("--label", default="")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    inputs = [args.ours] + args.nsys
    # A results file that does not exist yet cannot be an input (samefile needs both to exist).
    if args.out and os.path.exists(args.out) and any(os.path.exists(p) and os.path.samefile(args.out, p) for p in inputs):
        print(f"window_vs_nsys: --out {args.out} is one of the inputs", file=sys.stderr)
        return 2
    try:
        ours = kernel_counts(args.ours)
        theirs = sum((kernel_counts(path) for path in args.nsys), collections.Counter())
        graphs = (graph_launches(args.ours), sum(graph_launches(path) for path in args.nsys))
    except sqlite3.Error as error:
        print(f"window_vs_nsys: cannot read the kernels of {' '.join(inputs)}: {error}", file=sys.stderr)
        return 2
    differing = {name: [ours[name], theirs[name]] for name in sorted(set(ours) | set(theirs)) if ours[name] != theirs[name]}
    row = {
        "label": args.label,
        "ours_kernels": sum(ours.values()),
        "nsys_kernels": sum(theirs.values()),
        "ours_names": len(ours),
        "nsys_names": len(theirs),
        "ours_graph_launches": graphs[0],
        "nsys_graph_launches": graphs[1],
        "differing_names": differing,
        "equal": not differing and graphs[0] == graphs[1],
    }
    print(f"{args.label}: ours {row['ours_kernels']} kernels ({row['ours_names']} names), nsys "
          f"{row['nsys_kernels']} ({row['nsys_names']} names), {len(differing)} names differ; graph launches recorded "
          f"whole: ours {graphs[0]}, nsys {graphs[1]}")
    for name, (mine, nsys) in list(differing.items())[:20]:
        print(f"  {mine:>7} {nsys:>7}  {name[:140]}")
    if args.out:
        with open(args.out, "a") as out:
            out.write(json.dumps(row) + "\n")
    return 0 if row["equal"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        # stdout closed by the reader: say so once, on stderr.
        sys.stdout = None
        print("window_vs_nsys: standard output closed", file=sys.stderr)
        sys.exit(2)
