"""`benchmarks/scripts/duckdb_queries.py` on every sample run's Parquet dataset: DuckDB's answers agree with the report.

Needs DuckDB for Python (not installed by CI: the module is skipped there, saying so).
"""

import json
import subprocess
import sys

import pytest
from conftest import REPO, SAMPLE_RUNS

duckdb = pytest.importorskip("duckdb", reason="skipped: duckdb is not installed for this Python (pip install duckdb)")

SCRIPT = REPO / "benchmarks" / "scripts" / "duckdb_queries.py"


def export(cli, run, folder):
    cli("export", "--format", "parquet", str(folder), run)
    return folder


def queries(dataset, *args):
    return subprocess.run([sys.executable, str(SCRIPT), str(dataset), "--rounds", "1", *args], capture_output=True,
                          text=True, check=False)


@pytest.mark.parametrize("run", SAMPLE_RUNS)
def test_every_check_matches_the_report(cli, analyzer, run, tmp_path):
    dataset = export(cli, run, tmp_path / "ds")
    done = queries(dataset, "--analyzer", analyzer, "--json", str(tmp_path / "times.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    checks = json.loads((tmp_path / "times.json").read_text())["checks"]
    assert all(c["matched"] for c in checks)
    what = {c["what"].split(" = ")[0] for c in checks}
    # The checks that every dataset allows: each rank's wait and top kernels, the figures, the collective groups.
    assert {"wait per rank", "late arrivals per rank", "top-10 kernels per rank",
            "exposed comm and busy time per rank"} <= what
    report = json.loads(cli("report", "--format", "json", run))
    if any(r.get("phase_source") == "recorded" for r in report["ranks"]):
        assert "kernels per recorded phase" in what


def test_a_report_that_disagrees_is_named_and_fails(cli, tmp_path):
    dataset = export(cli, "sample-traces/tp2_nsys.sqlite.gz", tmp_path / "ds")
    report = json.loads(cli("report", "--format", "json", str(dataset)))
    wait_ns = report["ranks"][1]["comm_wait_ns"]
    report["ranks"][1]["comm_wait_ns"] = wait_ns + 1
    report["ranks"][0]["kernels"][0]["total_ns"] -= 1
    (tmp_path / "report.json").write_text(json.dumps(report))
    done = queries(dataset, "--report", str(tmp_path / "report.json"))
    assert done.returncode == 1
    differs = [line for line in done.stdout.splitlines() if line.startswith("check DIFFERS")]
    assert len(differs) == 2, done.stdout
    assert "wait per rank" in differs[0] and f"report {wait_ns + 1}, SQL {wait_ns}" in differs[0]
    assert "top-10 kernels per rank" in differs[1]
