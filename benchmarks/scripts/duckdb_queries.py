#!/usr/bin/env python3
"""Runs a fixed set of SQL queries with DuckDB over a Parquet dataset of `analyzer export --format parquet`, times
them in interleaved rounds, and checks their answers against the analyzer's own JSON report.

DuckDB reads the dataset's files directly (`read_parquet('DS/<table>/run=<run>/**/*.parquet', hive_partitioning =
true)`), so `rank` comes from the folder names. The queries:

  top_kernels          the 10 kernels with the most GPU time on each rank (table `kernels`)
  wait_by_collective   wait per collective type and communicator: instances, wait summed over every rank's row,
                       median over instances of the longest wait (table `collective_instances`)
  wait_per_rank        each rank's summed wait and late arrivals (table `collective_instances`)
  rank_busy            each rank's span, busy share, exposed communication (table `rank_figures`, whole-rank rows)
  kernels_per_phase    kernels per rank and phase, each kernel attributed in SQL as the report does: its launch
                       call (`cuda_api`, same process and correlation id) lies in a phase range (`nvtx`, name
                       matching the default phase pattern) on the launching thread: the latest one starting at or
                       before the launch, if still open, which is the report's innermost open range as long as a
                       thread's phase ranges do not nest (only when the trace has phase ranges: phases inferred
                       from the kernels are not in the trace tables)
  kernels_per_step     kernels per step range (`ProfilerStep#N`, … as the default step pattern), attributed the same
                       way, summarised per rank (only when the trace has step ranges)

Round 0 runs every query once in a fresh DuckDB connection (reported apart as the cold run: DuckDB has read no
file yet, but the operating system may hold them in its page cache); then `--rounds` rounds run every query again,
the order rotating by one each round so that no query always follows the same one. Each sample is the wall time
of `execute` plus fetching every row. `--time-report` adds the analyzer's whole report of the dataset (`analyzer
report --format json DATASET`, a process of its own) to the same rounds, for scale.

The check runs `analyzer report --format json DATASET` (or reads `--report FILE`) and compares, per rank: the wait
and late count summed from the matched instances with `comm_wait_ns` and `late_count`; the top-10 kernel totals
with the report's `kernels` rows; the exposed communication and busy time with `exposed_comm_ns`, `gpu_busy_ns`;
per communicator and type, the summed wait with the report's collective groups (and the median where one group
covers the pair); and, where the trace has them, the SQL phase attribution with each recorded phase's
`kernel_count` and the step ranges with `steps.found` + `steps.skipped`. It prints whether each matched; the exit
code is 1 when one did not.

    python3 benchmarks/scripts/duckdb_queries.py DS --rounds 10 --analyzer target/release/analyzer --time-report \
        --json times.json
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# The analyzer's defaults (analyzer/src/llm/phases.rs, analyzer/src/llm/steps.rs), in RE2 syntax, which both are.
PHASE_PATTERN = r"(?:^|[^A-Za-z])((?i:prefill|decode)|EXTEND|MIXED)(?:[^A-Za-z]|$)"
STEP_PATTERN = (r"(?i)^(ProfilerStep#\d+|execute_model|_?forward_step\b.*|(train_|training_)?step([ _#:-]*\d+)?"
                r"|iter(ation)?([ _#:-]*\d+)?)$")
TABLES = ["kernels", "memops", "cuda_api", "nvtx", "collectives", "cuda_graphs", "collective_instances",
          "rank_figures", "categories", "kernel_summary", "traces", "string_ids", "processes", "threads", "devices",
          "warnings"]


def sql_string(text):
    return "'" + text.replace("'", "''") + "'"


def launches_sql(table):
    """Each kernel's rank with its launch call's thread and start; kernels without a known launch keep NULLs."""
    return f"""
    launches AS (
        SELECT k.rank, a.traceId, a.globalPid, a.tid, a.start AS launch_ns
        FROM {table('kernels')} k
        LEFT JOIN (SELECT traceId, globalPid, tid, correlationId, start FROM {table('cuda_api')}
                   WHERE correlationId <> 0) a
          ON a.traceId = k.traceId AND a.globalPid = k.globalPid AND a.correlationId = k.correlationId
                                   AND k.correlationId <> 0)"""


def queries(table, has_phase_ranges, has_step_ranges):
    """Name → SQL. `table(name)` gives the `read_parquet(…)` expression of a table."""
    found = {
        "top_kernels": f"""
            SELECT rank, demangledName AS kernel, count(*) AS instances, sum("end" - start) AS total_ns
            FROM {table('kernels')}
            GROUP BY rank, demangledName
            QUALIFY row_number() OVER (PARTITION BY rank ORDER BY total_ns DESC, kernel) <= 10
            ORDER BY rank, total_ns DESC, kernel""",
        "wait_by_collective": f"""
            WITH per_instance AS (
                SELECT communicator, op, instanceId, any_value(instanceMaxWaitNs) AS max_wait_ns,
                       sum(waitNs) AS wait_ns, count(*) AS ranks
                FROM {table('collective_instances')}
                GROUP BY communicator, op, instanceId)
            SELECT communicator, op, count(*) AS instances, sum(ranks) AS rank_rows, sum(wait_ns) AS wait_total_ns,
                   median(max_wait_ns) AS max_wait_median_ns
            FROM per_instance
            GROUP BY communicator, op
            ORDER BY wait_total_ns DESC, communicator, op""",
        "wait_per_rank": f"""
            SELECT rank, count(*) AS instances, sum(waitNs) AS wait_ns, sum(transferNs) AS transfer_ns,
                   count(*) FILTER (WHERE late) AS late
            FROM {table('collective_instances')}
            GROUP BY rank ORDER BY rank""",
        "rank_busy": f"""
            SELECT rank, spanNs AS span_ns, gpuBusyNs AS busy_ns, round(100.0 * gpuBusyNs / spanNs, 2) AS busy_pct,
                   commNs AS comm_ns, exposedCommNs AS exposed_comm_ns,
                   round(exposedCommOverSpanPct, 2) AS exposed_pct_of_span, commWaitNs AS wait_ns
            FROM {table('rank_figures')}
            WHERE phase IS NULL
            ORDER BY rank""",
    }
    if has_phase_ranges:
        # The latest-starting phase range at or before the launch on its thread (ASOF), kept if it is still open:
        # the report's innermost open range as long as phase ranges of one thread do not nest (the check says so).
        found["kernels_per_phase"] = f"""
            WITH {launches_sql(table)},
            phase_ranges AS (
                SELECT traceId, globalPid, tid, start, "end",
                       lower(regexp_extract(text, {sql_string(PHASE_PATTERN)}, 1)) AS phase
                FROM {table('nvtx')}
                WHERE rangeKind <> 'gpu_annotation' AND regexp_matches(text, {sql_string(PHASE_PATTERN)}))
            SELECT l.rank, CASE WHEN l.launch_ns < p."end" THEN p.phase END AS phase, count(*) AS kernels
            FROM launches l ASOF LEFT JOIN phase_ranges p
              ON l.traceId = p.traceId AND l.globalPid = p.globalPid AND l.tid = p.tid AND l.launch_ns >= p.start
            GROUP BY ALL ORDER BY rank, phase NULLS LAST"""
    if has_step_ranges:
        found["kernels_per_step"] = f"""
            WITH {launches_sql(table)},
            step_ranges AS (
                SELECT rank, traceId, globalPid, tid, start, "end"
                FROM {table('nvtx')}
                WHERE rangeKind <> 'gpu_annotation' AND regexp_matches(text, {sql_string(STEP_PATTERN)})),
            per_step AS (
                SELECT s.rank, s.start, count(*) AS kernels
                FROM launches l ASOF JOIN step_ranges s
                  ON l.traceId = s.traceId AND l.globalPid = s.globalPid AND l.tid = s.tid AND l.launch_ns >= s.start
                WHERE l.launch_ns < s."end"
                GROUP BY ALL),
            steps_per_rank AS (SELECT rank, count(*) AS steps FROM step_ranges GROUP BY rank)
            SELECT r.rank, r.steps, count(p.kernels) AS steps_with_kernels, min(p.kernels) AS min_kernels,
                   median(p.kernels) AS median_kernels, max(p.kernels) AS max_kernels, sum(p.kernels) AS kernels
            FROM steps_per_rank r LEFT JOIN per_step p USING (rank)
            GROUP BY r.rank, r.steps ORDER BY r.rank"""
    return found


def dataset_run(dataset, run):
    runs = sorted(name[4:] for name in os.listdir(os.path.join(dataset, "kernels")) if name.startswith("run="))
    if run is None:
        if len(runs) != 1:
            sys.exit(f"{dataset}: holds runs {', '.join(runs) or '(none)'}; name one with --run")
        return runs[0]
    if run not in runs:
        sys.exit(f"{dataset}: no run {run} (runs: {', '.join(runs)})")
    return run


def dataset_size(con, dataset, run):
    """Rows, files and bytes per table of one run (rows from the Parquet footers)."""
    sizes = {}
    for name in TABLES:
        folder = os.path.join(dataset, name, f"run={run}")
        files = [os.path.join(root, f) for root, _, names in os.walk(folder) for f in names if f.endswith(".parquet")]
        if not files:
            continue
        rows = con.execute("SELECT sum(num_rows) FROM parquet_file_metadata(?)", [files]).fetchone()[0]
        sizes[name] = {"rows": int(rows), "files": len(files), "bytes": sum(os.path.getsize(f) for f in files)}
    return sizes


def show(name, columns, rows, limit):
    print(f"-- {name}: {len(rows)} rows" + (f" (first {limit} shown)" if len(rows) > limit else ""))
    shown = [[str(v) if v is not None else "NULL" for v in row] for row in rows[:limit]]
    widths = [max([len(c)] + [min(len(r[i]), 60) for r in shown]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in shown:
        print("  ".join((v if len(v) <= 60 else v[:57] + "...").ljust(w) for v, w in zip(row, widths, strict=True)))
    print()


def run_query(con, sql):
    start = time.perf_counter()
    cursor = con.execute(sql)
    rows = cursor.fetchall()
    return time.perf_counter() - start, [d[0] for d in cursor.description], rows


def analyzer_report(analyzer, dataset):
    """`analyzer report --format json DATASET`: (wall seconds, None, [its output])."""
    start = time.perf_counter()
    done = subprocess.run([analyzer, "report", "--format", "json", dataset], capture_output=True, text=True,
                          check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{analyzer} report failed: {done.stderr.strip()}")
    return seconds, None, [done.stdout]


def check(report, results):
    """Compares the query results with the analyzer's report; returns (what, matched, detail) triples."""
    checks = []
    ranks = {r["rank"]: r for r in report["ranks"]}

    def compare(what, expected, got):
        mismatched = sorted(k for k in set(expected) | set(got) if expected.get(k) != got.get(k))
        detail = f"{len(expected)} values" if not mismatched else "; ".join(
            f"{k}: report {expected.get(k)}, SQL {got.get(k)}" for k in mismatched[:5])
        checks.append((what, not mismatched, detail))

    def rows_of(query):
        # A query not run because its table has no files in the run: the table has no rows, nor has the answer.
        return results[query][1] if query in results else []

    rows = rows_of("wait_per_rank")
    # A rank without matched instances has no rows: the report's 0 stands for it.
    compare("wait per rank = report comm_wait_ns",
            {rank: r["comm_wait_ns"] for rank, r in ranks.items()},
            {rank: 0 for rank in ranks} | {row[0]: int(row[2]) for row in rows})
    compare("late arrivals per rank = report late_count",
            {rank: r["late_count"] for rank, r in ranks.items()},
            {rank: 0 for rank in ranks} | {row[0]: int(row[4]) for row in rows})

    rows = rows_of("top_kernels")
    compare("top-10 kernels per rank = report kernels (name, instances, total_ns)",
            {(rank, i): (k["name"], k["instances"], k["total_ns"]) for rank, r in ranks.items()
             for i, k in enumerate(r["kernels"][:10])},
            {(rank, i): (row[1], row[2], int(row[3])) for rank in {row[0] for row in rows}
             for i, row in enumerate(x for x in rows if x[0] == rank)})

    rows = rows_of("rank_busy")
    compare("exposed comm and busy time per rank = report exposed_comm_ns, gpu_busy_ns",
            {rank: (r["exposed_comm_ns"], r["gpu_busy_ns"]) for rank, r in ranks.items()},
            {row[0]: (row[5], row[2]) for row in rows})

    rows = rows_of("wait_by_collective")
    groups = {}
    for g in report["collectives"]["groups"]:
        groups.setdefault((g["communicator"], g["op"]), []).append(g)
    compare("wait per communicator and type = report collective groups' wait_total_ns (summed)",
            {key: (sum(g["count"] for g in gs), sum(g["wait_total_ns"] for g in gs)) for key, gs in groups.items()},
            {(row[0], row[1]): (row[2], int(row[4])) for row in rows})
    single = {key: gs[0]["wait_median_ns"] for key, gs in groups.items() if len(gs) == 1}
    if single:
        # The report halves the sum of the two middle values in integers; DuckDB's median gives the exact average.
        compare("median longest wait per instance = report wait_median_ns (pairs with one group)",
                single, {(row[0], row[1]): int(row[5]) for row in rows if (row[0], row[1]) in single})

    if "kernels_per_phase" in results:
        _, rows = results["kernels_per_phase"]
        recorded = {rank: r for rank, r in ranks.items() if r.get("phase_source") == "recorded"}
        compare("kernels per recorded phase = report phases[].kernel_count",
                {(rank, phase): p["kernel_count"] for rank, r in recorded.items()
                 for phase, p in r["phases"].items()},
                {(row[0], row[1]): row[2] for row in rows if row[1] is not None and row[0] in recorded})
    if "kernels_per_step" in results:
        _, rows = results["kernels_per_step"]
        from_ranges = {rank: r["steps"] for rank, r in ranks.items()
                       if r.get("steps") and r["steps"]["source"] == "step_ranges"}
        compare("step ranges per rank = report steps.found + steps.skipped",
                {rank: s["found"] + s["skipped"] for rank, s in from_ranges.items()},
                {row[0]: row[1] for row in rows if row[0] in from_ranges})
    return checks


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="folder written by `analyzer export --format parquet`")
    parser.add_argument("--run", help="run to query when the folder holds several")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds after the cold one (default 5)")
    parser.add_argument("--threads", type=int, help="DuckDB threads (default: DuckDB's, one per core)")
    parser.add_argument("--analyzer", help="analyzer binary for the check (runs `report --format json DATASET`)")
    parser.add_argument("--time-report", action="store_true",
                        help="also time `analyzer report --format json DATASET` in the same rounds (needs --analyzer)")
    parser.add_argument("--report", help="the analyzer's JSON report of the same run, instead of --analyzer")
    parser.add_argument("--json", help="write the timings, dataset size and check results here")
    parser.add_argument("--show", type=int, default=12, help="result rows printed per query (default 12)")
    args = parser.parse_args()

    if args.time_report and not args.analyzer:
        parser.error("--time-report needs --analyzer")
    try:
        import duckdb
    except ImportError:
        sys.exit("duckdb is not installed for this Python (pip install duckdb)")
    if not os.path.isfile(os.path.join(args.dataset, "_shardscope_dataset.json")):
        sys.exit(f"{args.dataset}: not a dataset of `analyzer export --format parquet` (no _shardscope_dataset.json)")
    run = dataset_run(args.dataset, args.run)

    def table(name):
        glob = os.path.join(args.dataset, name, f"run={run}", "**", "*.parquet")
        return f"read_parquet({sql_string(glob)}, hive_partitioning = true)"

    con = duckdb.connect()
    if args.threads:
        con.execute(f"SET threads = {args.threads}")
    threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
    sizes = dataset_size(con, args.dataset, run)
    has_phase_ranges = has_step_ranges = False
    if "nvtx" in sizes:
        has_phase_ranges, has_step_ranges = con.execute(
            f"SELECT bool_or(regexp_matches(text, {sql_string(PHASE_PATTERN)})), "
            f"bool_or(regexp_matches(text, {sql_string(STEP_PATTERN)})) "
            f"FROM {table('nvtx')} WHERE rangeKind <> 'gpu_annotation'").fetchone()
    con.close()
    print(f"dataset {args.dataset} (run {run}), DuckDB {duckdb.__version__}, {threads} threads, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    for name, size in sizes.items():
        print(f"  {name}: {size['rows']} rows, {size['files']} files, {size['bytes'] / 1e6:.1f} MB")
    print(f"  all: {sum(s['rows'] for s in sizes.values())} rows, {sum(s['files'] for s in sizes.values())} files, "
          f"{sum(s['bytes'] for s in sizes.values()) / 1e6:.1f} MB\n")

    sql = queries(table, has_phase_ranges, has_step_ranges)
    for name in list(sql):
        # A table with no rows in the run has no files, and DuckDB refuses a glob that matches none.
        missing = [t for t in TABLES if f"{t}/" in sql[name] and t not in sizes]
        if missing:
            print(f"{name}: not run, the run has no {', '.join(missing)} rows (the check takes its answer as empty)")
            del sql[name]
    names = list(sql)
    load_before = os.getloadavg()
    con = duckdb.connect()
    if args.threads:
        con.execute(f"SET threads = {args.threads}")
    runners = {name: (lambda name=name: run_query(con, sql[name])) for name in names}
    if args.time_report:
        # The whole report of the dataset, in the same rounds, for scale: what the queries answer without it.
        runners["analyzer_report"] = lambda: analyzer_report(args.analyzer, args.dataset)
        names.append("analyzer_report")
    samples = {name: [] for name in names}
    cold, results = {}, {}
    for name in names:
        cold[name], columns, rows = runners[name]()
        results[name] = (columns, rows)
    for round_index in range(args.rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            seconds, _, rows = runners[name]()
            if rows != results[name][1]:
                sys.exit(f"{name}: round {round_index + 1} gave other rows than the cold run")
            samples[name].append(seconds)
    load_after = os.getloadavg()

    for name in sql:
        show(name, *results[name], args.show)
    print(f"times over {args.rounds} rounds (s): median (min–max), cold = first run in a fresh connection")
    timings = {}
    for name in names:
        values = samples[name]
        timings[name] = {"cold_s": cold[name], "samples_s": values}
        if values:
            timings[name].update(median_s=statistics.median(values), min_s=min(values), max_s=max(values))
            print(f"  {name:20} {statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f}), "
                  f"cold {cold[name]:.3f}")
        else:
            print(f"  {name:20} cold {cold[name]:.3f}")
    print(f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after\n")

    checks = None
    report = None
    if args.report:
        with open(args.report) as f:
            report = json.load(f)
    elif "analyzer_report" in results:
        report = json.loads(results["analyzer_report"][1][0])
    elif args.analyzer:
        report = json.loads(analyzer_report(args.analyzer, args.dataset)[2][0])
    else:
        print("check skipped: give --analyzer BINARY or --report REPORT.json")
    if report is not None:
        checks = check(report, results)
        for what, matched, detail in checks:
            print(f"check {'MATCHED' if matched else 'DIFFERS'}: {what} ({detail})")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dataset": os.path.abspath(args.dataset), "run": run, "duckdb": duckdb.__version__,
                       "threads": threads, "cores": os.cpu_count(), "rounds": args.rounds,
                       "load_average_before": load_before, "load_average_after": load_after, "tables": sizes,
                       "queries": timings,
                       "checks": None if checks is None else [
                           {"what": w, "matched": m, "detail": d} for w, m, d in checks]}, f, indent=1)
    return 0 if checks is None or all(m for _, m, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
