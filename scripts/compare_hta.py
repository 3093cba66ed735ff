#!/usr/bin/env python3
"""Compare the analyzer's HTA-compatible figures with HTA's reference numbers.

Usage: python scripts/compare_hta.py REF.json OURS.json [--trace-set NAME] [--tolerance-pp 0.1]

REF.json is written by scripts/hta_reference.py. OURS.json is the output of
`analyzer report --format json`; the per-rank objects are taken from the first
list (searched depth-first) whose items all have `rank` and `hta` keys (a reference
file is accepted too, to test this script). Each rank object carries `rank`,
`comm_comp_overlap_pct` (inside `hta`, else beside it) and an `hta` object with
`comm_ns`, `comp_ns`, `mem_ns`, `comm_pct`, `comp_pct`, `mem_pct` and, optionally,
`overlap_states_pct` / `overlap_states_ns` keyed by HTA's state labels.

Every figure is compared in percentage points: pct fields directly, ns fields as a
share of the rank's reference union time (`hta.union_ns`). The script prints one
table row per figure and exits with status 1 when any figure is off by more than
the tolerance or is missing, and with status 2 on unreadable input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

PCT_FIELDS = ("comm_pct", "comp_pct", "mem_pct")
NS_FIELDS = ("comm_ns", "comp_ns", "mem_ns")


def read_json(path: str):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, json.JSONDecodeError) as err:
        print(f"{path}: {err}", file=sys.stderr)
        sys.exit(2)


def reference_ranks(doc: dict, path: str, trace_set: str | None) -> list:
    sets = doc.get("trace_sets")
    if not isinstance(sets, list) or not sets:
        print(f"{path}: no trace_sets (not written by hta_reference.py?)", file=sys.stderr)
        sys.exit(2)
    if trace_set is not None:
        sets = [s for s in sets if trace_set in s.get("trace", "")]
    if len(sets) != 1:
        names = ", ".join(s.get("trace", "?") for s in doc["trace_sets"])
        print(f"{path}: pick exactly one trace set with --trace-set (have: {names})", file=sys.stderr)
        sys.exit(2)
    return sets[0]["ranks"]


def our_ranks(doc, path: str, trace_set: str | None) -> list:
    if isinstance(doc, dict) and "trace_sets" in doc:
        return reference_ranks(doc, path, trace_set)
    found = find_rank_list(doc)
    if found is None:
        print(f"{path}: found no list of objects with 'rank' and 'hta' keys", file=sys.stderr)
        sys.exit(2)
    return found


def find_rank_list(node):
    """The first list (depth-first) whose items are objects with 'rank' and 'hta' keys.

    Lets the comparison follow the report's layout without pinning where the
    per-rank list sits in it.
    """
    if isinstance(node, list):
        if node and all(isinstance(item, dict) and "rank" in item and "hta" in item for item in node):
            return node
        children = node
    elif isinstance(node, dict):
        children = node.values()
    else:
        return None
    for child in children:
        found = find_rank_list(child)
        if found is not None:
            return found
    return None


def as_number(value):
    """None and NaN both mean 'undefined' (e.g. overlap of a rank without communication)."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def compare(ref_ranks: list, ours_by_rank: dict, tolerance_pp: float) -> list:
    """Return table rows: (rank, figure, reference, ours, difference in pp, ok)."""
    rows = []

    def check(rank, figure, ref_value, our_value, scale_pp=1.0):
        ref_value, our_value = as_number(ref_value), as_number(our_value)
        if ref_value is None or our_value is None:
            ok = ref_value is None and our_value is None
            rows.append((rank, figure, ref_value, our_value, None, ok))
            return
        diff_pp = (our_value - ref_value) * scale_pp
        rows.append((rank, figure, ref_value, our_value, diff_pp, abs(diff_pp) <= tolerance_pp))

    for ref in ref_ranks:
        rank = ref["rank"]
        ours = ours_by_rank.get(rank)
        if ours is None:
            rows.append((rank, "rank present", "yes", "missing", None, False))
            continue
        ref_hta, our_hta = ref["hta"], ours.get("hta") or {}
        # The HTA-compatible overlap sits inside `hta`; a rank-level figure is used only when
        # `hta` has none (the rank-level one may be computed over a different step window).
        our_overlap = (
            our_hta["comm_comp_overlap_pct"]
            if "comm_comp_overlap_pct" in our_hta
            else ours.get("comm_comp_overlap_pct")
        )
        check(rank, "comm_comp_overlap_pct", ref.get("comm_comp_overlap_pct"), our_overlap)
        for field in PCT_FIELDS:
            check(rank, field, ref_hta.get(field), our_hta.get(field))
        union_ns = ref_hta.get("union_ns") or 0
        for field in NS_FIELDS:
            # ns figures become percentage points of the rank's union time.
            scale = 100.0 / union_ns if union_ns else 0.0
            check(rank, field, ref_hta.get(field), our_hta.get(field), scale)
        our_states = our_hta.get("overlap_states_pct")
        if our_states is not None:
            ref_states = ref_hta.get("overlap_states_pct", {})
            for label in sorted(set(ref_states) | set(our_states)):
                check(rank, f"state: {label}", ref_states.get(label, 0.0), our_states.get(label, 0.0))
    return rows


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if float(value).is_integer() and abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description="Compare analyzer figures with HTA reference numbers.")
    parser.add_argument("reference")
    parser.add_argument("ours")
    parser.add_argument("--trace-set", help="substring of the reference trace path to compare against")
    parser.add_argument("--tolerance-pp", type=float, default=0.1, help="allowed difference (percentage points)")
    args = parser.parse_args()

    ref_ranks = reference_ranks(read_json(args.reference), args.reference, args.trace_set)
    ours = our_ranks(read_json(args.ours), args.ours, args.trace_set)
    ours_by_rank = {}
    for entry in ours:
        if not isinstance(entry, dict) or "rank" not in entry:
            print(f"{args.ours}: rank entry without 'rank': {str(entry)[:80]}", file=sys.stderr)
            sys.exit(2)
        ours_by_rank[int(entry["rank"])] = entry

    rows = compare(ref_ranks, ours_by_rank, args.tolerance_pp)
    print(f"{'rank':>4}  {'figure':<58} {'hta':>16} {'ours':>16} {'diff pp':>9}  ok")
    for rank, figure, ref_value, our_value, diff_pp, ok in rows:
        diff = "-" if diff_pp is None else f"{diff_pp:+.4f}"
        print(f"{rank:>4}  {figure:<58} {fmt(ref_value):>16} {fmt(our_value):>16} {diff:>9}  {'yes' if ok else 'NO'}")
    failures = sum(1 for row in rows if not row[5])
    print(f"{len(rows)} figures, {failures} off by more than {args.tolerance_pp} pp")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
