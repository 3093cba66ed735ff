"""The Dask path on a two-worker local cluster: the same report JSON as the CLI on every sample."""

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from distributed import Client, LocalCluster

import shardscope
from conftest import REPO, SAMPLE_RUNS
from shardscope import Options
from shardscope import dask as sd


@pytest.fixture(scope="module")
def client():
    # Workers open the inputs relative to their own working folder, which they take from the process that starts
    # the cluster: the repository root, as the CLI is run here.
    before = os.getcwd()
    os.chdir(REPO)
    try:
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        with Client(cluster) as c:
            yield c
        cluster.close()
    finally:
        os.chdir(before)


def without_findings(text):
    """The CLI's report JSON less its ``findings`` (they replay the traces in one place, which Dask never holds)."""
    report = json.loads(text)
    report.pop("findings")
    return report


#: The memory samples: their reports have a ``memory`` section, which the parts must carry too.
MEMORY_RUNS = [f"sample-traces/memory/{name}" for name in
               ("memory_probe_capture.sqlite.gz", "memory_probe_nsys.sqlite.gz", "memory_probe_kineto.json.gz")]


@pytest.mark.parametrize("run", SAMPLE_RUNS + MEMORY_RUNS)
def test_dask_report_is_the_clis(run, client, cli):
    expected = without_findings(cli("report", "--format", "json", run))
    # Several buckets: the instances of one run are matched by different tasks.
    assert json.loads(sd.analyze_json([run], client=client, buckets=3)) == expected


def test_dask_memory_section_has_the_samples_peaks(client):
    report = sd.analyze([MEMORY_RUNS[0]], client=client, buckets=2)
    assert report["memory"][0]["cuda"]["peak_bytes"] == 721_552_384
    report = sd.analyze([MEMORY_RUNS[2]], client=client, buckets=2)
    framework = report["memory"][0]["framework"]
    assert (framework["peak_allocated_bytes"], framework["peak_reserved_bytes"]) == (419_433_984, 654_311_424)


def test_results_carry_the_memory_figures(client, tmp_path):
    text = sd.analyze_json([MEMORY_RUNS[0]], client=client, buckets=2)
    written = sd.write_results(text, str(tmp_path))
    figures = pq.read_table(written["memory_figures"]).to_pandas()
    whole = figures[figures.phase.isna()]
    assert int(whole.peak_bytes.iloc[0]) == 721_552_384
    assert "memory_figures" not in sd.write_results(sd.analyze_json(["sample-traces/tp1_nsys.sqlite.gz"], client=client),
                                                    str(tmp_path / "plain"))


def test_analyze_returns_what_run_report_returns(client):
    run = "sample-traces/tp2_capture.sqlite.gz"
    report = sd.analyze([run], client=client, buckets=2)
    assert isinstance(report, dict)
    assert report == without_findings(shardscope.load(run).report_json())


def test_folder_ranks_are_separate_tasks_and_instances_are_kept(client, cli):
    run = "sample-traces/kineto_tp2"
    assert len(sd.expand_inputs([run])) == 2
    text = sd.analyze_json([run], Options(keep_instances=True), client=client, buckets=2)
    report = json.loads(text)
    assert report["collectives"]["matched_instances"] == len(report["instances"]) > 0
    plain = without_findings(cli("report", "--format", "json", run))
    assert {k: v for k, v in report.items() if k != "instances"} == plain


def test_results_are_written_as_parquet(client, tmp_path):
    text = sd.analyze_json(["sample-traces/tp2_skew_capture.sqlite.gz"], Options(keep_instances=True), client=client)
    written = sd.write_results(text, str(tmp_path))
    report = json.loads((tmp_path / "report.json").read_text())
    figures = pq.read_table(written["rank_figures"]).to_pandas()
    whole = figures[figures.phase.isna()]
    assert sorted(whole["rank"]) == [r["rank"] for r in report["ranks"]]
    assert whole.comm_wait_ns.sum() == sum(r["comm_wait_ns"] for r in report["ranks"])
    instances = pq.read_table(written["collective_instances"]).to_pandas()
    assert instances.wait_ns.sum() == whole.comm_wait_ns.sum()


def test_module_command_starts_its_own_cluster(cli, tmp_path):
    run = "sample-traces/tp2_nsys.sqlite.gz"
    done = subprocess.run([sys.executable, "-m", "shardscope.dask", "--workers", "2", "--memory-limit", "2GiB", run],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == without_findings(cli("report", "--format", "json", run))
    wrong = subprocess.run([sys.executable, "-m", "shardscope.dask", "--memory-limit", "lots", run], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert wrong.returncode == 2
    assert wrong.stderr.strip() == "shardscope.dask: --memory-limit: 'lots' is not a size such as 4GiB"
    bad = subprocess.run([sys.executable, "-m", "shardscope.dask", str(tmp_path / "missing.sqlite")], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2
    assert "missing.sqlite" in bad.stderr.strip().splitlines()[-1]


def test_a_closed_stdout_stops_quietly_as_the_cli_does():
    with subprocess.Popen([sys.executable, "-m", "shardscope.dask", "--workers", "1", "--keep-instances",
                           "sample-traces/tp2_skew_capture.sqlite.gz"], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as done:
        done.stdout.close()
        stderr = done.stderr.read().decode()
        assert done.wait(timeout=300) == 0, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


def test_a_damaged_file_among_good_ones_is_one_line_naming_it(tmp_path):
    # Both files of the Kineto sample in one reading task (one worker, one chunk), the second cut short.
    import shutil

    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(REPO / "sample-traces/kineto_tp2/rank0.pt.trace.json.gz", folder / "rank0.pt.trace.json.gz")
    data = (REPO / "sample-traces/kineto_tp2/rank1.pt.trace.json.gz").read_bytes()
    (folder / "rank1.pt.trace.json.gz").write_bytes(data[: len(data) // 2])
    done = subprocess.run([sys.executable, "-m", "shardscope.dask", "--workers", "1", "--chunks", "1", str(folder)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("shardscope.dask: ") and "rank1.pt.trace.json.gz" in last, last
    assert "Traceback" not in done.stderr


def test_ranks_on_two_hosts_are_aligned_the_same(client, cli, tmp_path):
    # The Kineto sample with each rank on a host of its own (`host_name`, as Kineto writes it): clocks are then
    # aligned on collective ends, which the Dask path computes in a keyed pass of its own.
    import gzip

    folder = tmp_path / "two_hosts"
    folder.mkdir()
    for index, name in enumerate(["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]):
        trace = json.loads(gzip.open(REPO / "sample-traces/kineto_tp2" / name).read())
        trace["host_name"] = f"node{index}"
        with gzip.open(folder / name, "wt") as f:
            json.dump(trace, f)
    expected = without_findings(cli("report", "--format", "json", str(folder)))
    assert expected["collectives"]["clocks_aligned"] is True
    assert json.loads(sd.analyze_json([str(folder)], client=client, buckets=2)) == expected
    # Both files read by one task, and each by its own: the same report.
    assert json.loads(sd.analyze_json([str(folder)], client=client, buckets=3, chunks=1)) == expected
    assert json.loads(sd.analyze_json([str(folder)], client=client, buckets=1, chunks=2)) == expected


def test_a_scheduler_address_is_used_when_given(client, cli):
    # As with `--scheduler tcp://…`: a client of its own to a running scheduler (here the fixture's), closed after.
    run = "sample-traces/tp2_capture.sqlite.gz"
    address = client.scheduler.address
    assert json.loads(sd.analyze_json([run], scheduler=address)) == without_findings(cli("report", "--format", "json", run))
    assert client.status == "running"


def test_a_large_job_is_read_in_more_smaller_chunks(tmp_path):
    # Sparse files: their sizes count, their bytes take no disk.
    for i in range(10):
        with open(tmp_path / f"rank{i}.json.gz", "wb") as f:
            f.truncate(100 << 20)
    inputs = sd.expand_inputs([str(tmp_path)])
    # 1000 MiB of input: one chunk per 128 MiB beats four per worker …
    assert sd._default_chunks(inputs, 1) == 8
    # … four per worker beat it when there are more workers, but never more chunks than files.
    assert sd._default_chunks(inputs, 2) == 8
    assert sd._default_chunks(inputs, 3) == 10
    # A small job keeps four chunks per worker.
    assert sd._default_chunks(inputs[:3], 1) == 3
    small = tmp_path / "small"
    small.mkdir()
    for i in range(6):
        (small / f"rank{i}.json.gz").write_bytes(b"x" * 1000)
    assert sd._default_chunks(sd.expand_inputs([str(small)]), 1) == 4
