#!/usr/bin/env python3
"""What a capture file holds for the analysis: kernels, and how many of them lack their launching call.

    python3 benchmarks/scripts/check_capture.py run.sqlite [more.sqlite ...]

Every kernel needs the API call that launched it (its thread and start time decide its phase); this
prints, per file and process, the kernels, the API rows by name, and the kernels with no API row of the
same process and correlation id.
"""
import sqlite3
import sys


def check(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    print(f"== {path}")
    kernels = db.execute("SELECT globalPid >> 24, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1").fetchall()
    missing = dict(db.execute(
        "SELECT k.globalPid >> 24, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "WHERE NOT EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "  WHERE r.correlationId = k.correlationId AND r.globalTid >> 24 = k.globalPid >> 24) GROUP BY 1").fetchall())
    for pid, count in kernels:
        print(f"process {pid & 0xffffff}: {count} kernels, {missing.get(pid, 0)} without their launch call")
    api = db.execute(
        "SELECT s.value, COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "GROUP BY 1 ORDER BY 2 DESC").fetchall()
    print("API rows:", ", ".join(f"{name} {count}" for name, count in api))
    for name, value in db.execute("SELECT name, value FROM SHARDSCOPE_CAPTURE_META "
                                  "WHERE name IN ('trace', 'apiCalls', 'recordCounts', 'addedHostNsPerLaunch')"):
        print(f"meta {name}: {value}")


for path in sys.argv[1:]:
    check(path)
