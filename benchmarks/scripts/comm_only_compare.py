#!/usr/bin/env python3
"""What `capture --comm-only` recorded against the default capture's kernels, per collective.

Reads the capture files `comm_only_gpu.sh` / `comm_only_gpu_check.sh` brought back
(`<config>-<mode>.sqlite[.gz]`). Each collective instance (communicator, type, sequence number, on every rank) gets
the analyzer's figures (analyzer/src/figures/collectives.rs): transfer = last end - latest start over the ranks,
longest wait = max over ranks of min(latest start, own end) - own start. Its kernels are those the capture file links
to the NCCL plugin's operations (`kernelCorrelationId`, `kernelStart`): CUPTI's in a default capture, the ones made
from NCCL's kernel-channel timers in a `--comm-only` capture. Per configuration and message size:

1. Same run (`capture-timers`, the default capture plus the plugin's GPU timers): every collective timed twice, by
   CUPTI's kernels and by its channels placed on the host clock (`SHARDSCOPE_NCCL_CHANNELS.start/end`), paired by
   communicator and sequence number: median ratio of the transfers, median differences.
2. Same run, as `--comm-only`'s kernel sample would widen it: the first `--sample` collectives of each process
   give the kernels' extra length over their channels, every later channel span is widened by it (half before,
   half after) and paired with its kernel.
3. Between runs: medians of the `--comm-only` file against the default capture's (`capture`, else
   `capture-timers`).

    python3 benchmarks/scripts/comm_only_compare.py --dir results/ --out compare.json
"""

import argparse
import gzip
import json
import os
import shutil
import sqlite3
import statistics
import tempfile

KERNELS = """SELECT n.commId, n.func, n.seqNumber, n.bytes, n.globalPid, k.start, k.end
    FROM SHARDSCOPE_NCCL_COLLECTIVES n JOIN CUPTI_ACTIVITY_KIND_KERNEL k
      ON k.globalPid = n.globalPid AND k.correlationId = n.kernelCorrelationId AND k.start = n.kernelStart
    WHERE n.kind = 'coll'"""
CHANNELS = """SELECT n.commId, n.func, n.seqNumber, n.bytes, n.globalPid, min(h.start), max(h.end)
    FROM SHARDSCOPE_NCCL_CHANNELS h JOIN SHARDSCOPE_NCCL_COLLECTIVES n ON n.globalPid = h.globalPid AND n.event = h.event
    WHERE n.kind = 'coll' AND h.start IS NOT NULL AND h.end IS NOT NULL GROUP BY n.globalPid, n.event"""


def unpacked(path, scratch):
    if not path.endswith(".gz"):
        return path
    target = os.path.join(scratch, os.path.basename(path)[:-3])
    with gzip.open(path, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return target


def instances(path, query):
    """(communicator, type, seq) -> (transfer ns, longest wait ns, bytes), for instances seen on two or more ranks."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = conn.execute(query).fetchall()
    conn.close()
    members = {}
    for comm, func, seq, size, _, start, end in rows:
        members.setdefault((comm, func, seq), []).append((start, end, size))
    out = {}
    for key, parts in members.items():
        if len(parts) < 2:
            continue
        latest = max(s for s, _, _ in parts)
        out[key] = (max(e for _, e, _ in parts) - latest, max(min(latest, e) - s for s, e, _ in parts), parts[0][2])
    return out


def rows_of(path, query):
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = conn.execute(query).fetchall()
    conn.close()
    return rows


def as_instances(rows):
    """instances() over rows already read: (communicator, type, seq) -> (transfer, longest wait, bytes)."""
    members = {}
    for comm, func, seq, size, _, start, end in rows:
        members.setdefault((comm, func, seq), []).append((start, end, size))
    out = {}
    for key, parts in members.items():
        if len(parts) >= 2:
            latest = max(s for s, _, _ in parts)
            out[key] = (max(e for _, e, _ in parts) - latest, max(min(latest, e) - s for s, e, _ in parts), parts[0][2])
    return out


def sample_widened(path, sample):
    """What `--comm-only`'s kernel sample does, tried within one `capture-timers` run: per process, the first
    `sample` collectives (by kernel start) give the median of (kernel duration - channel span); every later
    collective's channel span is widened by it, half before and half after, and compared with its CUPTI kernel.
    (The capture fits per kernel name first, with algorithm and protocol; this check fits per process only.)"""
    kernels, channels = rows_of(path, KERNELS), rows_of(path, CHANNELS)
    by_pid = {}
    for row in kernels:
        by_pid.setdefault(row[4], []).append(row)
    channel_of = {(r[4], r[0], r[1], r[2]): r for r in channels}
    sampled, widened, fits = set(), [], {}
    for pid, rows in by_pid.items():
        rows.sort(key=lambda r: r[5])
        pairs = [(k, channel_of[(pid, k[0], k[1], k[2])]) for k in rows if (pid, k[0], k[1], k[2]) in channel_of]
        head = pairs[:sample]
        if len(head) < 4:
            continue
        extra = statistics.median((k[6] - k[5]) - (c[6] - c[5]) for k, c in head)
        fits[pid] = {"kernel_minus_channels_ns": extra, "pairs": len(head),
                     "lead_ns": statistics.median(c[5] - k[5] for k, c in head),
                     "lag_ns": statistics.median(k[6] - c[6] for k, c in head)}
        sampled.update((k[0], k[1], k[2]) for k, _ in head)
        before = extra // 2
        widened += [c[:5] + (c[5] - before, c[6] + extra - before) for _, c in pairs[sample:]]
    later = lambda inst: {key: v for key, v in inst.items() if key not in sampled}
    return {"fits": fits, "by_size": paired(later(as_instances(kernels)), later(as_instances(widened)))}


def by_size(rows):
    groups = {}
    for value in rows.values():
        groups.setdefault(value[2], []).append(value)
    return {size: {"n": len(v), "transfer_median_ns": statistics.median(x[0] for x in v),
                   "max_wait_median_ns": statistics.median(x[1] for x in v)}
            for size, v in sorted(groups.items(), key=lambda kv: kv[0] or 0)}


def paired(kernels, channels):
    groups = {}
    for key, k in kernels.items():
        c = channels.get(key)
        if c is not None and k[0] > 0:
            groups.setdefault(k[2], []).append((k, c))
    out = {}
    for size, pairs in sorted(groups.items(), key=lambda kv: kv[0] or 0):
        out[size] = {
            "n": len(pairs),
            "kernel_transfer_median_ns": statistics.median(k[0] for k, _ in pairs),
            "channel_transfer_median_ns": statistics.median(c[0] for _, c in pairs),
            "transfer_ratio_median": round(statistics.median(c[0] / k[0] for k, c in pairs), 3),
            "transfer_difference_median_ns": statistics.median(c[0] - k[0] for k, c in pairs),
            "kernel_max_wait_median_ns": statistics.median(k[1] for k, _ in pairs),
            "max_wait_difference_median_ns": statistics.median(c[1] - k[1] for k, c in pairs),
        }
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True, help="folder with <config>-<mode>.sqlite[.gz]")
    parser.add_argument("--out", required=True)
    parser.add_argument("--sample", type=int, default=64, help="collectives per process in the kernel sample "
                        "(capture --comm-sample)")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="comm-only-compare-")
    result = {}
    for config in ["tp2", "tp2-launch"]:
        files = {}
        for mode in ["capture", "capture-comm-only", "capture-timers"]:
            for suffix in [".sqlite.gz", ".sqlite"]:
                path = os.path.join(args.dir, f"{config}-{mode}{suffix}")
                if os.path.exists(path):
                    files[mode] = unpacked(path, scratch)
                    break
        entry = {}
        if "capture-timers" in files:
            entry["same_run_channels_vs_kernels"] = paired(instances(files["capture-timers"], KERNELS),
                                                           instances(files["capture-timers"], CHANNELS))
            entry["same_run_sample_widened"] = sample_widened(files["capture-timers"], args.sample)
        baseline = "capture" if "capture" in files else "capture-timers"
        if baseline in files and "capture-comm-only" in files:
            entry["between_runs"] = {"baseline": baseline,
                                     baseline: by_size(instances(files[baseline], KERNELS)),
                                     "capture-comm-only": by_size(instances(files["capture-comm-only"], KERNELS))}
        if entry:
            result[config] = entry
    shutil.rmtree(scratch, ignore_errors=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
