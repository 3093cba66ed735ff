#!/usr/bin/env bash
# Times `analyzer what-if --straggler-artifact` on the three artifact traces of the OSDI'25 straggler paper:
# RUNS rounds (default 10), each round one fresh process per trace (ST, AR, SE, interleaved). Per trace: the
# median and min–max of the wall time of the whole process, and of its CPU time (user + system, all threads),
# which the load of other processes on the machine disturbs less. Release build.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p shardscope-analyzer --bin analyzer
python3 - "${RUNS:-10}" <<'PY'
import os, resource, statistics, subprocess, sys, time
runs = int(sys.argv[1])
data = "analyzer/tests/data/straggler-artifact"
trials = {"ST": "6,784", "AR": "117,216", "SE": "107,328"}
wall, cpu = {t: [] for t in trials}, {t: [] for t in trials}
for _ in range(runs):
    for trial in trials:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(["target/release/analyzer", "what-if", "--straggler-artifact", f"{data}/trace-{trial}.parquet",
                        "--artifact-meta", f"{data}/meta-{trial}.yaml", "--format", "json"],
                       check=True, stdout=subprocess.DEVNULL)
        wall[trial].append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu[trial].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
print(f"load average before the last run: {os.getloadavg()[0]:.1f}")
print("| trace | rows | runs | wall median | wall min – max | CPU median | CPU min – max |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for trial, rows in trials.items():
    w, c = sorted(wall[trial]), sorted(cpu[trial])
    print(f"| {trial} | {rows} | {len(w)} | {statistics.median(w):.3f} s | {w[0]:.3f} – {w[-1]:.3f} s "
          f"| {statistics.median(c):.3f} s | {c[0]:.3f} – {c[-1]:.3f} s |")
PY
