#!/usr/bin/env python3
"""What `capture --comm-only` recorded against the default capture of the same configuration.

Reads the capture files `comm_only_gpu.sh` brought back (`<config>-<mode>.sqlite[.gz]`) and, per configuration:

1. Between runs: the analyzer's matched collective instances of the `--comm-only` file and of the default
   capture's, per collective type and message size: median transfer and median longest wait over the
   instances, and their ratio (comm-only over default).
2. Within one run (`capture-timers`: the default capture plus the NCCL plugin's GPU timers): each collective
   timed twice, by CUPTI's kernels (the analyzer's instances) and by NCCL's channel times placed on the host
   clock (`SHARDSCOPE_NCCL_CHANNELS`), paired by communicator and sequence number; the median ratio of the two
   transfers and the median difference of the two longest waits.

    python3 bench/scripts/comm_only_compare.py --analyzer target/debug/analyzer --dir results/ --out compare.json
"""

import argparse
import gzip
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import tempfile

MODES = ["capture", "capture-comm-only", "capture-timers"]


def unpacked(path, scratch):
    if not path.endswith(".gz"):
        return path
    target = os.path.join(scratch, os.path.basename(path)[:-3])
    with gzip.open(path, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return target


def instances(analyzer, path):
    done = subprocess.run([analyzer, "collectives", "--format", "json", path], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{path}: analyzer failed: {done.stderr.strip()}")
    report = json.loads(done.stdout)
    return report.get("instances", []), report.get("notes", []), report.get("warnings", [])


def groups(rows):
    """Per (type, bytes): n, median transfer, median longest wait (ns)."""
    by_key = {}
    for row in rows:
        by_key.setdefault((row["op"], row.get("bytes")), []).append(row)
    out = {}
    for (op, size), members in sorted(by_key.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        out[f"{op} {size} B"] = {
            "n": len(members),
            "transfer_median_ns": statistics.median(m["transfer_ns"] for m in members),
            "max_wait_median_ns": statistics.median(m["max_wait_ns"] for m in members),
            "wait_total_ns": sum(m["wait_total_ns"] for m in members),
        }
    return out


def channel_instances(path):
    """Per (communicator, seq): transfer and longest wait from NCCL's channel times on the session clock."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = conn.execute(
        "SELECT c.commId, c.seqNumber, c.globalPid, min(h.start), max(h.end) FROM SHARDSCOPE_NCCL_CHANNELS h "
        "JOIN SHARDSCOPE_NCCL_COLLECTIVES c ON c.globalPid = h.globalPid AND c.event = h.event "
        "WHERE c.kind = 'coll' AND h.start IS NOT NULL AND h.end IS NOT NULL "
        "GROUP BY c.globalPid, c.event").fetchall()
    conn.close()
    by_key = {}
    for comm, seq, _, start, end in rows:
        by_key.setdefault((f"{comm & (2**64 - 1):#x}", seq), []).append((start, end))
    out = {}
    for key, members in by_key.items():
        if len(members) < 2:
            continue
        latest = max(s for s, _ in members)
        waits = [min(latest, e) - s for s, e in members]
        out[key] = {"transfer_ns": max(e for _, e in members) - latest, "max_wait_ns": max(waits)}
    return out


def paired(kernel_rows, channel_rows):
    ratios, wait_differences = [], []
    for row in kernel_rows:
        other = channel_rows.get((row["communicator"], row["seq"]))
        if other is None or row["transfer_ns"] <= 0:
            continue
        ratios.append(other["transfer_ns"] / row["transfer_ns"])
        wait_differences.append(other["max_wait_ns"] - row["max_wait_ns"])
    if not ratios:
        return {"pairs": 0}
    return {
        "pairs": len(ratios),
        "transfer_ratio_median": round(statistics.median(ratios), 4),
        "transfer_ratio_p10": round(sorted(ratios)[len(ratios) // 10], 4),
        "transfer_ratio_p90": round(sorted(ratios)[len(ratios) * 9 // 10], 4),
        "max_wait_difference_median_ns": statistics.median(wait_differences),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--analyzer", required=True)
    parser.add_argument("--dir", required=True, help="folder with <config>-<mode>.sqlite[.gz]")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="comm-only-compare-")
    result = {}
    for config in ["tp2", "tp2-launch"]:
        files = {}
        for mode in MODES:
            for suffix in [".sqlite.gz", ".sqlite"]:
                path = os.path.join(args.dir, f"{config}-{mode}{suffix}")
                if os.path.exists(path):
                    files[mode] = unpacked(path, scratch)
                    break
        if not files:
            continue
        entry = {}
        rows = {}
        for mode, path in files.items():
            rows[mode], notes, warnings = instances(args.analyzer, path)
            all_transfers = [r["transfer_ns"] for r in rows[mode]]
            all_waits = [r["max_wait_ns"] for r in rows[mode]]
            entry[mode] = {
                "instances": len(rows[mode]),
                "transfer_median_ns": statistics.median(all_transfers) if all_transfers else None,
                "max_wait_median_ns": statistics.median(all_waits) if all_waits else None,
                "wait_total_ns": sum(r["wait_total_ns"] for r in rows[mode]),
                "groups": groups(rows[mode]),
                "notes": notes,
                "warnings": warnings,
            }
        # The default capture's kernels; where only the one with GPU timers was kept, its kernels (CUPTI's too).
        base_mode = "capture" if "capture" in entry else "capture-timers"
        if base_mode in entry and "capture-comm-only" in entry:
            entry["baseline"] = base_mode
            base, light = entry[base_mode], entry["capture-comm-only"]
            entry["comm_only_over_capture"] = {
                key: {
                    "transfer_ratio": round(light["groups"][key]["transfer_median_ns"]
                                            / base["groups"][key]["transfer_median_ns"], 4)
                    if base["groups"][key]["transfer_median_ns"] else None,
                    "max_wait_ratio": round(light["groups"][key]["max_wait_median_ns"]
                                            / base["groups"][key]["max_wait_median_ns"], 4)
                    if base["groups"][key]["max_wait_median_ns"] else None,
                }
                for key in base["groups"] if key in light["groups"]
            }
        if "capture-timers" in files:
            entry["same_run_channels_vs_kernels"] = paired(rows["capture-timers"],
                                                           channel_instances(files["capture-timers"]))
        result[config] = entry
    shutil.rmtree(scratch, ignore_errors=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    for config, entry in result.items():
        print(f"== {config}")
        for mode in MODES:
            if mode in entry:
                e = entry[mode]
                print(f"  {mode}: {e['instances']} instances, transfer median {e['transfer_median_ns']} ns, "
                      f"longest-wait median {e['max_wait_median_ns']} ns, wait total {e['wait_total_ns']} ns")
        for key, ratio in entry.get("comm_only_over_capture", {}).items():
            print(f"  {key}: comm-only / {entry['baseline']} transfer {ratio['transfer_ratio']}, "
                  f"wait {ratio['max_wait_ratio']}")
        if "same_run_channels_vs_kernels" in entry:
            print(f"  same run, channels vs kernels: {entry['same_run_channels_vs_kernels']}")


if __name__ == "__main__":
    main()
