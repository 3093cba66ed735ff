#!/usr/bin/env python3
"""Offline part of the memory check: torch.profiler's `[memory]` events against PyTorch's own numbers, from the
files `memory_check.py` brought back (no GPU needed).

For each step of `workloads/memory_probe.py`, `torch.cuda.memory_allocated()` and `memory_reserved()` read right
after the step (printed by the profiled run) against `Total Allocated` and `Total Reserved` of the last GPU
`[memory]` event before the next step starts (after the step's own frees; for the last step, before the weights are
freed); and the run's `max_memory_allocated()` / `max_memory_reserved()` against the highest totals of the trace.
`memory_check.py`'s own in-run comparison took the last event inside the step's span instead, which comes before the
frees at its end, so it compares different moments; this is the comparison that means something.

    python3 benchmarks/scripts/memory_check_kineto.py sample-traces/memory/memory_probe_kineto.json.gz \
        benchmarks/results/memory-check-h100-sitting1.json.gz
"""

import gzip
import json
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def main():
    trace, results = load(sys.argv[1]), load(sys.argv[2])
    events = trace["traceEvents"]
    memory = sorted(
        (e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1), key=lambda e: e["ts"]
    )
    steps = sorted(
        (e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e["name"].startswith("step")),
        key=lambda e: e["ts"],
    )
    torch_after = {s["step"]: s for s in results["kineto"]["steps"]}
    weight_bytes = 2048 * 2048 * 2
    equal = 0
    for i, step in enumerate(steps):
        following = steps[i + 1]["ts"] if i + 1 < len(steps) else None
        inside = [m for m in memory if m["ts"] >= step["ts"] and (following is None or m["ts"] < following)]
        if following is None:
            inside = [m for m in inside if m["args"]["Bytes"] != -weight_bytes]
        last = inside[-1]["args"]
        mine = torch_after[step["name"]]
        same = (mine["torch_allocated"], mine["torch_reserved"]) == (last["Total Allocated"], last["Total Reserved"])
        equal += same
        print(
            f"{step['name']:>7}: torch allocated {mine['torch_allocated']:>11} kineto {last['Total Allocated']:>11}   "
            f"torch reserved {mine['torch_reserved']:>11} kineto {last['Total Reserved']:>11}   {'equal' if same else 'DIFFERENT'}"
        )
    running, mismatches = None, 0
    for m in memory:
        if running is not None and running + m["args"]["Bytes"] != m["args"]["Total Allocated"]:
            mismatches += 1
        running = m["args"]["Total Allocated"]
    print(f"steps equal: {equal} of {len(steps)}; GPU [memory] events: {len(memory)}; "
          f"Total Allocated not the running sum of Bytes: {mismatches}")
    print(f"highest Total Allocated {max(m['args']['Total Allocated'] for m in memory)}, "
          f"highest Total Reserved {max(m['args']['Total Reserved'] for m in memory)}; the capture run's torch: "
          f"max_memory_allocated {results['capture_torch']['max_memory_allocated']}, "
          f"max_memory_reserved {results['capture_torch']['max_memory_reserved']}")


main()
