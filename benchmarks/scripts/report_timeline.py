#!/usr/bin/env python3
"""Where a command leaves cores idle: its CPU time sampled every few milliseconds, beside its stage lines.

Runs one command (an `analyzer` run with `SHARDSCOPE_STAGE_TIMES=1` set), reads the process's user and system time
from `/proc/PID/stat` every `--interval-ms` and timestamps each stage line of its standard error as it arrives. Prints:

- per slice of `--slice-ms`: the cores busy in it (CPU seconds over wall seconds) and the last stage line ended by
  then;
- how much of the wall time ran with few cores busy (below 2, 2-4, 4-8, 8-12, 12 and over);
- the whole run's wall time, CPU time and mean cores busy.

Only Linux (`/proc`). The command's standard output is hashed (SHA-256) so that runs can be checked for the same bytes.

    SHARDSCOPE_STAGE_TIMES=1 taskset -c 0-15 python3 report_timeline.py -- analyzer report --format json big.sqlite
"""

import argparse
import hashlib
import os
import subprocess
import sys
import threading
import time

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    """The user plus system time of `pid` so far, seconds (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the command name: state is field 3, utime field 14, stime field 15 (1-based, as proc(5) counts).
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def run(command, interval_s):
    start = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    samples, lines, digest = [], [], hashlib.sha256()

    def read_stderr():
        for raw in child.stderr:
            lines.append((time.monotonic() - start, raw.decode(errors="replace").rstrip()))

    def read_stdout():
        for chunk in iter(lambda: child.stdout.read(1 << 16), b""):
            digest.update(chunk)

    readers = [threading.Thread(target=read_stderr), threading.Thread(target=read_stdout)]
    for reader in readers:
        reader.start()
    while child.poll() is None:
        used = cpu_s(child.pid)
        if used is not None:
            samples.append((time.monotonic() - start, used))
        time.sleep(interval_s)
    wall_s = time.monotonic() - start
    for reader in readers:
        reader.join()
    return samples, lines, wall_s, digest.hexdigest(), child.returncode


def slices(samples, lines, slice_s):
    """(slice end, cores busy, last stage line ended by then) per slice."""
    out, stage_at = [], 0
    if len(samples) < 2:
        return out
    t, end = samples[0][0], samples[-1][0]
    i = 0
    while t < end:
        t_next = min(t + slice_s, end)
        # CPU time at t and t_next, read off the nearest samples at or before them.
        while i + 1 < len(samples) and samples[i + 1][0] <= t:
            i += 1
        j = i
        while j + 1 < len(samples) and samples[j + 1][0] <= t_next:
            j += 1
        busy = (samples[j][1] - samples[i][1]) / max(samples[j][0] - samples[i][0], 1e-9) if j > i else 0.0
        while stage_at < len(lines) and lines[stage_at][0] <= t_next:
            stage_at += 1
        last = lines[stage_at - 1][1] if stage_at else ""
        out.append((t_next, busy, last))
        t = t_next
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    parser.add_argument("--slice-ms", type=float, default=100.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    samples, lines, wall_s, sha, code = run(command, args.interval_ms / 1000)
    cut = slices(samples, lines, args.slice_ms / 1000)
    print(f"# {' '.join(command)}")
    print(f"# exit {code}, stdout sha256 {sha}")
    for t, line in lines:
        print(f"{t:8.3f} s  {line}")
    print("# slice end (s), cores busy, last stage line ended")
    for t, busy, last in cut:
        print(f"{t:8.2f} {busy:6.2f}  {last.replace('analyzer: stage ', '')[:60]}")
    bands = [(0, 2), (2, 4), (4, 8), (8, 12), (12, 1e9)]
    width = args.slice_ms / 1000
    print("# wall time by cores busy")
    for low, high in bands:
        seconds = sum(width for _, busy, _ in cut if low <= busy < high)
        name = f"{low}-{high}" if high < 1e9 else f"{low}+"
        print(f"cores {name:>6}: {seconds:6.2f} s")
    total_cpu = samples[-1][1] if samples else 0.0
    print(f"# wall {wall_s:.2f} s, CPU at last sample {total_cpu:.2f} s, mean cores busy {total_cpu / wall_s:.2f}")
    return code


if __name__ == "__main__":
    sys.exit(main())
