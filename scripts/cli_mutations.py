#!/usr/bin/env python3
"""Damaged inputs through the whole command line: corrupts the bundled sample traces at random and runs analyzer
commands on them until the time is up, printing every run that breaks the rules for bad input.

Each run takes one sample (nsys exports and captures, a Kineto JSON trace), damages a copy (one bit flipped,
bytes overwritten, a run zeroed, the file cut short, or a stretch of it repeated elsewhere) and runs one command
on it (`report` as JSON, streamed and with a skipped step, `kern-sum`, `findings`, `collectives`, `critical-path`,
`what-if`, `modules`) under an 8 GiB address-space limit and a 60 s timeout. A run breaks the rules when it exits
with anything but 0 or 2, prints a panic, times out, or exits 2 with more than one line on standard error (bad
input is one line naming the file and the cause). Such inputs are kept beside the work files for replay.

    cargo build --release -p shardscope-analyzer
    python3 scripts/cli_mutations.py --seconds 600 [--seed 1] [--analyzer target/release/analyzer]

The last line gives the runs, the rule-breaking ones and the exit statuses seen; the exit status is 1 when any
run broke the rules.
"""
import argparse
import gzip
import os
import random
import resource
import shutil
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = [
    "tp2_skew_capture.sqlite.gz",
    "tp1_nsys.sqlite.gz",
    "engines/hf_qwen3_static.sqlite.gz",
    "engines/jax_blocks.sqlite.gz",
    "engines/hf_server_static_2windows.sqlite.gz",
    "kineto_tp2/rank0.pt.trace.json.gz",
]
COMMANDS = [
    ["report", "--format", "json"],
    ["report", "--streaming", "on"],
    ["report", "--skip-steps", "1"],
    ["kern-sum"],
    ["findings"],
    ["collectives", "--format", "json"],
    ["critical-path"],
    ["what-if"],
    ["modules"],
]
ADDRESS_SPACE_BYTES = 8 << 30


def damaged(data: bytes, rng: random.Random) -> tuple[str, bytearray]:
    """A copy of `data` damaged one of five ways, and the way's name."""
    data = bytearray(data)
    kind = rng.choice(["flip", "overwrite", "cut", "zero", "repeat"])
    at = rng.randrange(len(data))
    if kind == "flip":
        data[at] ^= 1 << rng.randrange(8)
    elif kind == "overwrite":
        for _ in range(rng.randrange(2, 200)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == "cut":
        del data[at:]
    elif kind == "zero":
        end = min(len(data), at + rng.randrange(1, 5000))
        data[at:end] = bytes(end - at)
    else:
        to = rng.randrange(len(data))
        data[to:to] = data[at : at + rng.randrange(1, 3000)]
    return kind, data


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--analyzer", default=os.path.join(ROOT, "target/release/analyzer"))
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    samples = {name: gzip.open(os.path.join(ROOT, "sample-traces", name)).read() for name in SAMPLES}
    work = tempfile.mkdtemp(prefix="shardscope-mutations-")
    deadline = time.monotonic() + args.seconds
    runs, broken, statuses = 0, 0, {}
    while time.monotonic() < deadline:
        name = rng.choice(SAMPLES)
        kind, data = damaged(samples[name], rng)
        suffix = ".json" if name.endswith(".json.gz") else ".sqlite"
        path = os.path.join(work, "input" + suffix)
        with open(path, "wb") as f:
            f.write(data)
        command = rng.choice(COMMANDS)
        # The streamed report needs two files: the same one twice.
        inputs = [path, path] if "--streaming" in command else [path]
        try:
            done = subprocess.run([args.analyzer, *command, *inputs], capture_output=True, timeout=60,
                                  preexec_fn=limit_memory)
            status, stderr = done.returncode, done.stderr.decode(errors="replace")
        except subprocess.TimeoutExpired:
            status, stderr = "timeout", ""
        runs += 1
        statuses[status] = statuses.get(status, 0) + 1
        lines = [line for line in stderr.splitlines() if line.strip()]
        if status not in (0, 2) or "panicked" in stderr or (status == 2 and len(lines) != 1):
            broken += 1
            kept = os.path.join(work, f"broken{broken:03d}{suffix}")
            shutil.copy(path, kept)
            print("BROKEN", status, kind, name, " ".join(command), kept, "|", " / ".join(lines[:3])[:400], flush=True)
    if broken == 0:
        shutil.rmtree(work)
    kept = f", the broken inputs kept in {work}" if broken else ""
    print(f"runs {runs}, broken {broken}, exit statuses {statuses}{kept}")
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
