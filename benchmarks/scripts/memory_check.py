#!/usr/bin/env python3
"""GPU check of `capture --trace memory`, on one GPU, in one sitting.

1. `workloads/memory_probe.py` captured with `capture --trace all,memory` and with Nsight Systems
   (`--cuda-memory-usage=true`): both `CUDA_GPU_MEMORY_USAGE_EVENTS` tables compared event for event (memory kind,
   operation, bytes, in time order), and each run's device-memory peak (running sum of device allocations minus
   releases) against the `torch.cuda.max_memory_reserved()` that run printed.
2. The same program under torch.profiler (`profile_memory=True`): the `[memory]` events' `Total Allocated` at the
   end of each step against `torch.cuda.memory_allocated()` read there.
3. Cost on a launch-bound loop (`workloads/torch_launch_cost.py`): uncaptured, `capture --trace all` and
   `capture --trace all,memory`, interleaved, the order rotated each round; medians with min–max (`--rounds 0`
   skips it).
4. With `--analyzer`: the report's peak split by origin (`peak_by_origin`, `outside_framework_at_peak`) of each
   recorded file against the `max_memory_reserved()` its run printed: the framework-segment bytes should equal it,
   and the peak be it plus the named library bytes; and the allocations of the capture whose allocating call the
   capture recorded (the correlation id finds a row of `CUPTI_ACTIVITY_KIND_RUNTIME`).

Nsight Systems is optional: `--nsys-dir` (an install folder), else `--nsys` or `nsys` on PATH, else the nsys part
is skipped.

Writes everything it saw to `--out` (JSON) and copies the capture, the nsys export and the Kineto trace, gzipped,
beside it.

    python3 benchmarks/scripts/memory_check.py --capture .devcarry/w30/capture --nsys-dir $D --nsys-lib .devcarry/w30/nsys-lib \
        --rounds 6 --budget-s 300 --out $OUT/memory-check.json
    python3 benchmarks/scripts/memory_check.py --capture .devcarry/memory/capture --analyzer .devcarry/memory/analyzer \
        --rounds 0 --no-kineto --out $OUT/memory-origin-check.json
"""

import argparse
import gzip
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time

PROBE = "workloads/memory_probe.py"
LAUNCH = ["workloads/torch_launch_cost.py", "200", "100"]


def set_workloads(folder):
    """Where the two workload scripts are (a copy beside the binaries on a machine without the checkout)."""
    global PROBE, LAUNCH
    PROBE = os.path.join(folder, "memory_probe.py")
    LAUNCH = [os.path.join(folder, "torch_launch_cost.py"), "200", "100"]


def run(cmd, env=None, timeout=300):
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    wall = time.monotonic() - started
    if done.returncode != 0:
        print("FAILED", cmd, done.returncode, done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
    return done, wall


def probe_json(stdout):
    for line in stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return None


def usage_rows(path):
    """Rows of CUDA_GPU_MEMORY_USAGE_EVENTS in time (then row) order."""
    conn = sqlite3.connect(path)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(CUDA_GPU_MEMORY_USAGE_EVENTS)")]
    rows = conn.execute(
        "SELECT start, deviceId, memKind, memoryOperationType, bytes, address FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
        "ORDER BY start, rowid"
    ).fetchall()
    enums = {}
    for table in ("ENUM_CUDA_MEM_KIND", "ENUM_CUDA_DEV_MEM_EVENT_OPER", "ENUM_CUDA_MEMPOOL_OPER", "ENUM_CUDA_MEMPOOL_TYPE"):
        try:
            enums[table] = conn.execute(f"SELECT id, name, label FROM {table}").fetchall()
        except sqlite3.Error:
            enums[table] = None
    pool_cols = [r[1] for r in conn.execute("PRAGMA table_info(CUDA_GPU_MEMORY_POOL_EVENTS)")]
    conn.close()
    return cols, rows, enums, pool_cols


def device_peak(rows):
    """Peak of the running device-memory sum (memKind 2), with its time and event index."""
    level, peak, at = 0, 0, None
    for index, (start, _dev, kind, op, nbytes, _addr) in enumerate(rows):
        if kind != 2:
            continue
        level += nbytes if op == 0 else -nbytes
        if level > peak:
            peak, at = level, (start, index)
    return peak, at, level


def compare_series(ours, theirs):
    a = [(k, o, b) for (_s, _d, k, o, b, _a) in ours]
    b = [(k, o, b) for (_s, _d, k, o, b, _a) in theirs]
    first_difference = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return {
        "ours": len(a),
        "nsys": len(b),
        "equal": a == b,
        "first_difference": first_difference,
        "ours_around": a[max(0, (first_difference or 0) - 3) : (first_difference or 0) + 3],
        "nsys_around": b[max(0, (first_difference or 0) - 3) : (first_difference or 0) + 3],
        "by_kind_op_ours": counts(a),
        "by_kind_op_nsys": counts(b),
    }


def counts(series):
    out = {}
    for kind, op, nbytes in series:
        key = f"kind{kind}_op{op}"
        entry = out.setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += nbytes
    return out


def gzip_to(src, dst):
    with open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)


def kineto_check(path, after):
    """`Total Allocated` of the last [memory] event inside each step's record_function span."""
    trace = json.load(open(path))
    events = trace.get("traceEvents", [])
    memory = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    steps = {e["name"]: e for e in events if e.get("ph") == "X" and e.get("name", "").startswith("step")}
    checks = []
    for item in after:
        span = steps.get(item["step"])
        if span is None:
            checks.append({"step": item["step"], "missing_span": True})
            continue
        end = span["ts"] + span.get("dur", 0)
        inside = [m for m in memory if m["ts"] <= end and m["args"].get("Device Type") == 1]
        last = inside[-1]["args"] if inside else {}
        checks.append(
            {
                "step": item["step"],
                "torch_allocated": item["allocated"],
                "kineto_total_allocated": last.get("Total Allocated"),
                "torch_reserved": item["reserved"],
                "kineto_total_reserved": last.get("Total Reserved"),
            }
        )
    return {"memory_events": len(memory), "steps": checks}


def launch_cost(capture, rounds, budget_end, out_dir, base_env):
    modes = ["uncaptured", "capture all", "capture all,memory"]
    samples = {m: [] for m in modes}
    order = list(modes)
    for r in range(rounds):
        if time.monotonic() > budget_end:
            break
        for mode in order:
            if mode == "uncaptured":
                cmd = ["python3", *LAUNCH]
            else:
                trace = mode.split(" ", 1)[1]
                cmd = [capture, "--force", "--no-nccl-plugin", "--trace", trace, "-o", f"{out_dir}/launch.sqlite", "--",
                       "python3", *LAUNCH]
            done, wall = run(cmd, env=base_env)
            ns = None
            for line in done.stdout.splitlines():
                if line.startswith("launch_ns"):
                    ns = float(line.split()[2])
            samples[mode].append({"round": r, "launch_ns": ns, "wall_s": wall})
        order = order[1:] + order[:1]
    summary = {}
    for mode, values in samples.items():
        xs = [v["launch_ns"] for v in values if v["launch_ns"] is not None]
        if xs:
            summary[mode] = {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}
    base = {v["round"]: v["launch_ns"] for v in samples["uncaptured"]}
    plain = {v["round"]: v["launch_ns"] for v in samples["capture all"]}
    for mode in modes[1:]:
        ratios = [v["launch_ns"] / base[v["round"]] for v in samples[mode] if v["launch_ns"] and base.get(v["round"])]
        vs_plain = [v["launch_ns"] / plain[v["round"]] for v in samples[mode] if v["launch_ns"] and plain.get(v["round"])]
        if ratios:
            summary[mode]["ratio_to_uncaptured"] = [statistics.median(ratios), min(ratios), max(ratios)]
        if vs_plain:
            summary[mode]["ratio_to_capture_all"] = [statistics.median(vs_plain), min(vs_plain), max(vs_plain)]
    return {"samples": samples, "summary": summary}


def allocating_calls(path):
    """Device allocations of a SQLite file, and how many of them have their allocating call in
    CUPTI_ACTIVITY_KIND_RUNTIME (same correlation id), by call name."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT s.value FROM CUDA_GPU_MEMORY_USAGE_EVENTS m LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = m.correlationId LEFT JOIN StringIds s ON s.id = r.nameId "
            "WHERE m.memKind = 2 AND m.memoryOperationType = 0"
        ).fetchall()
    except sqlite3.Error as e:
        return {"error": str(e)}
    finally:
        conn.close()
    names = {}
    for (name,) in rows:
        names[name or "(no call recorded)"] = names.get(name or "(no call recorded)", 0) + 1
    return {"device_allocations": len(rows), "by_call": names}


def origin_check(analyzer, path, torch_numbers):
    """The report's CUDA-level peak and its split by origin against the run's max_memory_reserved()."""
    done, _ = run([analyzer, "report", "--format", "json", path])
    if done.returncode != 0:
        return {"error": done.stderr[-1000:]}
    memory = json.loads(done.stdout).get("memory") or []
    cuda = (memory[0] if memory else {}).get("cuda")
    reserved = (torch_numbers or {}).get("max_memory_reserved")
    if not cuda or not reserved:
        return {"error": "no CUDA-level memory in the report or no max_memory_reserved", "reserved": reserved}
    split = cuda.get("peak_by_origin", {})
    peak = cuda["peak_bytes"]
    named = split.get("library_bytes", 0)
    return {
        "peak_bytes": peak,
        "torch_max_memory_reserved": reserved,
        "peak_over_reserved": peak / reserved,
        "peak_at_least_reserved": peak >= reserved,
        "framework_segment_bytes": split.get("framework_segment_bytes"),
        "framework_equals_reserved": split.get("framework_segment_bytes") == reserved,
        "library_bytes": named,
        "unknown_bytes": split.get("unknown_bytes"),
        "libraries": split.get("libraries"),
        "peak_is_reserved_plus_named_libraries": peak == reserved + named,
        "unexplained_over_reserved": (peak - reserved - named) / reserved,
        "outside_framework_at_peak": cuda.get("outside_framework_at_peak"),
    }


def nsys_paths(a):
    """(nsys, QdstrmImporter or None), or None when no Nsight Systems is at hand."""
    if a.nsys_dir:
        return (f"{a.nsys_dir}/target-linux-x64/nsys", f"{a.nsys_dir}/linux-desktop-glibc_2_11_3-x64/QdstrmImporter")
    found = a.nsys or shutil.which("nsys")
    return (found, None) if found else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--capture", required=True)
    p.add_argument("--nsys-dir")
    p.add_argument("--nsys-lib")
    p.add_argument("--nsys", help="the nsys binary (default: --nsys-dir's, else nsys on PATH)")
    p.add_argument("--analyzer", help="the analyzer binary: check the report's peak split by origin")
    p.add_argument("--no-kineto", action="store_true", help="skip the torch.profiler run")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--budget-s", type=float, default=300)
    p.add_argument("--workloads", default="workloads")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    set_workloads(a.workloads)
    budget_end = time.monotonic() + a.budget_s
    out_dir = os.path.dirname(os.path.abspath(a.out))
    work = "/tmp/memcheck"
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", "0"))
    result = {"gpu": subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout}

    plain, _ = run(["python3", PROBE], env=env)
    result["plain_torch"] = probe_json(plain.stdout)

    cap, wall = run([a.capture, "--force", "--no-nccl-plugin", "--trace", "all,memory", "-o", f"{work}/ours.sqlite",
                     "--", "python3", PROBE], env=env)
    result["capture_torch"] = probe_json(cap.stdout)
    result["capture_stderr_tail"] = cap.stderr[-1500:]

    result["capture_allocating_calls"] = allocating_calls(f"{work}/ours.sqlite")
    files = [("ours", f"{work}/ours.sqlite", result["capture_torch"], "memory_probe_capture.sqlite.gz")]
    paths = nsys_paths(a)
    if paths:
        nsys, importer = paths
        lib = [os.path.abspath(a.nsys_lib)] if a.nsys_lib else []
        nenv = dict(env, LD_LIBRARY_PATH=":".join(lib + [env.get("LD_LIBRARY_PATH", "")]))
        ns, _ = run([nsys, "profile", "-t", "cuda,nvtx", "--cuda-memory-usage=true", "--sample=none",
                     "--cpuctxsw=none", "-f", "true", "-o", f"{work}/r", "python3", PROBE], env=nenv)
        result["nsys_torch"] = probe_json(ns.stdout)
        if not os.path.exists(f"{work}/r.nsys-rep") and importer:
            run([importer, "-i", f"{work}/r.qdstrm"], env=nenv)
        run([nsys, "export", "--type", "sqlite", "-f", "true", "-o", f"{work}/r.sqlite", f"{work}/r.nsys-rep"],
            env=nenv)
        reports, _ = run([nsys, "stats", "--help-reports"], env=nenv)
        result["nsys_stats_reports_with_mem"] = [l for l in reports.stdout.splitlines() if "mem" in l.lower()]
        files.append(("nsys", f"{work}/r.sqlite", result["nsys_torch"], "memory_probe_nsys.sqlite.gz"))
    else:
        result["nsys"] = "no Nsight Systems: skipped"

    rows = {}
    for name, path, torch_numbers, _ in files:
        if not os.path.exists(path):
            result[f"peak_{name}"] = {"error": f"{path} missing"}
            continue
        cols, rows[name], enums, pool = usage_rows(path)
        result.setdefault("columns", {})[name] = cols
        result.setdefault("pool_columns", {})[name] = pool
        result.setdefault("enums", {})[name] = enums
        peak, at, end_level = device_peak(rows[name])
        reserved = (torch_numbers or {}).get("max_memory_reserved")
        result[f"peak_{name}"] = {"peak_bytes": peak, "at": at, "end_level": end_level,
                                  "torch_max_memory_reserved": reserved,
                                  "ratio": peak / reserved if reserved else None}
        if a.analyzer:
            result[f"origin_{name}"] = origin_check(a.analyzer, path, torch_numbers)
    if "ours" in rows and "nsys" in rows:
        result["columns"]["equal"] = result["columns"]["ours"] == result["columns"]["nsys"]
        result["series"] = compare_series(rows["ours"], rows["nsys"])
    for _, src, _, dst in files:
        if os.path.exists(src):
            gzip_to(src, f"{out_dir}/{dst}")

    prof_numbers = None
    if not a.no_kineto:
        prof, _ = run(["python3", PROBE], env=dict(env, TORCH_PROF=f"{work}/kineto.json"))
        prof_numbers = probe_json(prof.stdout)
    if prof_numbers and os.path.exists(f"{work}/kineto.json"):
        result["kineto"] = kineto_check(f"{work}/kineto.json", prof_numbers["after_step"])
        gzip_to(f"{work}/kineto.json", f"{out_dir}/memory_probe_kineto.json.gz")

    result["launch"] = launch_cost(a.capture, a.rounds, budget_end, work, env)
    json.dump(result, open(a.out, "w"), indent=1)
    shown = ("series", "peak_ours", "peak_nsys", "capture_allocating_calls", "origin_ours", "origin_nsys")
    print(json.dumps({k: result[k] for k in shown if k in result}, indent=1)[:8000])
    print(json.dumps(result["launch"]["summary"], indent=1))
    print(json.dumps(result.get("kineto", {}), indent=1)[:3000])


if __name__ == "__main__":
    main()
