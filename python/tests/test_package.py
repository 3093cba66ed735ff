"""The package against the `analyzer` binary: the same report JSON on every sample, and tables that agree with it."""

import json

import pandas
import polars
import pytest

import shardscope
from conftest import SAMPLE_RUNS


@pytest.mark.parametrize("run", SAMPLE_RUNS)
def test_report_is_the_clis(run, cli):
    assert shardscope.report_json(run) == cli("report", "--format", "json", run).rstrip("\n")


def test_findings_are_the_clis(cli):
    run = "sample-traces/tp2_skew_capture.sqlite.gz"
    found = shardscope.load(run).findings()
    assert found == json.loads(cli("findings", "--format", "json", run))
    # Ranked by saving per run among the recurring causes (replays), the warm-up bound (once per run) after them.
    assert [f["basis"] for f in found["findings"]] == ["replay", "replay", "bound"]
    assert shardscope.load(run).report()["findings"] == found


def test_options_reach_the_analysis(cli):
    run = "sample-traces/tp2_nsys.sqlite.gz"
    whole = shardscope.report(run)
    first = min(r["span_ns"] for r in whole["ranks"])
    # A window through the trace: the figures change, and they change as the CLI's do.
    times = shardscope.load(run).kernels().to_pandas()
    start, end = int(times.start_ns.min()), int(times.start_ns.min() + (times.end_ns.max() - times.start_ns.min()) // 2)
    windowed = shardscope.report_json(run, window_ns=(start, end), skip_steps=2)
    assert windowed == cli("report", "--format", "json", "--window", f"{start}:{end}", "--skip-steps", "2", run).rstrip("\n")
    assert json.loads(windowed)["ranks"][0]["span_ns"] < first


def test_a_parquet_dataset_reads_back_to_the_same_report(cli, tmp_path):
    run = "sample-traces/tp2_skew_capture.sqlite.gz"
    cli("export", "--format", "parquet", "-o", str(tmp_path / "ds"), run)
    assert shardscope.report_json(str(tmp_path / "ds")) == cli("report", "--format", "json", str(tmp_path / "ds")).rstrip("\n")


def test_tables_agree_with_the_report():
    run = shardscope.load("sample-traces/tp2_skew_capture.sqlite.gz")
    report = run.report()
    kernels = run.kernels()
    # Every kernel of every rank, as many as the report counts.
    assert kernels.num_rows == sum(r["kernel_count"] for r in report["ranks"]) > 0
    # Each rank's wait at matched collectives is the sum of its rows in the instances table.
    instances = polars.from_arrow(run.instances())
    assert instances.height > 0
    waits = dict(instances.group_by("rank").agg(polars.col("wait_ns").sum()).iter_rows())
    for rank in report["ranks"]:
        assert waits.get(rank["rank"], 0) == rank["comm_wait_ns"]
        assert rank["comm_wait_ns"] + rank["comm_transfer_ns"] > 0
    # Instances: one per matched instance and rank taking part.
    assert instances.select(["communicator", "op", "seq"]).unique().height == report["collectives"]["matched_instances"]
    # Each member's kernel times: the wait is the latest start of its instance less its own start (one host here).
    latest = instances.group_by(["communicator", "op", "seq"]).agg(polars.col("start_ns").max().alias("latest"))
    joined = instances.join(latest, on=["communicator", "op", "seq"])
    start = polars.col("start_ns")
    checked = joined.select(
        (polars.col("wait_ns") == polars.min_horizontal(polars.col("latest") - start, polars.col("end_ns") - start))
        .alias("ok")
    )
    assert checked["ok"].all()
    tables = run.report_tables()
    figures = tables["rank_figures"].to_pandas()
    whole = figures[figures.phase.isna()].set_index("rank")
    for rank in report["ranks"]:
        assert whole.loc[rank["rank"], "gpu_busy_ns"] == rank["gpu_busy_ns"]
    categories = tables["categories"].to_pandas()
    for rank in report["ranks"]:
        rows = categories[(categories["rank"] == rank["rank"]) & categories.phase.isna()]
        assert dict(zip(rows.category, rows.duration_ns)) == rank["categories"]
    groups = tables["collective_groups"].to_pandas()
    assert int(groups["count"].sum()) == report["collectives"]["matched_instances"]
    assert isinstance(run.collectives().to_pandas(), pandas.DataFrame)


def test_what_if_is_the_clis(cli):
    run = "sample-traces/tp2_skew_capture.sqlite.gz"
    result, tables = shardscope.load(run).what_if(no_straggler=True, step=3)
    assert result == json.loads(cli("what-if", "--no-straggler", "--step", "3", "--format", "json", run))
    assert tables["by_rank"].num_rows == len(result["by_rank"])
    assert tables["rank_waits"].to_pandas().measured_wait_ns.tolist() == [w["measured_wait_ns"] for w in result["rank_waits"]]
    # Communication at the machine's measured bus bandwidth, as `--comm-at-peak`.
    bench = "bench/results/h200x2.json"
    result, _ = shardscope.load(run).what_if(comm_at_peak=bench, step=3)
    assert result == json.loads(cli("what-if", "--comm-at-peak", bench, "--step", "3", "--format", "json", run))
    assert result["scenario"] != json.loads(cli("what-if", "--no-straggler", "--step", "3", "--format", "json", run))["scenario"]


def test_bad_input_is_one_line_naming_the_file(tmp_path):
    bad = tmp_path / "broken.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    with pytest.raises(shardscope.ShardscopeError) as caught:
        shardscope.load(str(bad))
    message = str(caught.value)
    assert "broken.sqlite" in message and "\n" not in message
    with pytest.raises(shardscope.ShardscopeError, match="missing.sqlite"):
        shardscope.load(str(tmp_path / "missing.sqlite"))


def test_the_walkthrough_runs():
    # The example is documentation: it must keep working (it checks its Dask result against the package itself).
    import subprocess
    import sys

    from conftest import REPO

    done = subprocess.run([sys.executable, "python/examples/walkthrough.py"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "collective instances matched on Dask" in done.stdout
