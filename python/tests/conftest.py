"""Shared fixtures: the repository's sample traces and the `analyzer` binary the package is checked against."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample-traces"

#: Every run in `sample-traces/`: each file alone, and the folder of per-rank Kineto files.
SAMPLE_RUNS = sorted(str(p.relative_to(REPO)) for p in SAMPLES.glob("*.sqlite.gz")) + ["sample-traces/kineto_tp2"]


def analyzer_binary():
    """`SHARDSCOPE_ANALYZER`, else the workspace's debug or release build, else `analyzer` on PATH."""
    chosen = os.environ.get("SHARDSCOPE_ANALYZER")
    if chosen:
        return chosen
    for profile in ("debug", "release"):
        candidate = REPO / "target" / profile / "analyzer"
        if candidate.is_file():
            return str(candidate)
    return shutil.which("analyzer")


@pytest.fixture(scope="session")
def analyzer():
    binary = analyzer_binary()
    if binary is None:
        pytest.skip("skipped: no analyzer binary (cargo build -p shardscope-analyzer, or set SHARDSCOPE_ANALYZER)")
    return binary


@pytest.fixture(scope="session")
def cli(analyzer):
    """Runs `analyzer ARGS` in the repository root; returns its standard output."""

    def run(*args):
        done = subprocess.run([analyzer, *args], cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    return run


@pytest.fixture(autouse=True)
def in_repo(monkeypatch):
    # Inputs are named as the CLI names them: relative to the repository root.
    monkeypatch.chdir(REPO)
