"""``Run.memory()`` on the memory samples: the table's levels agree with the report's ``memory`` section and with
what PyTorch printed for the same program (``benchmarks/results/memory-check-h100-sitting1.json.gz``)."""

import shardscope


def test_cuda_level_table_agrees_with_the_report():
    run = shardscope.load("sample-traces/memory/memory_probe_capture.sqlite.gz")
    table = run.memory().to_pandas()
    cuda = table[table.level == "cuda"]
    assert len(cuda) == 504
    device = cuda[cuda.memory_kind == "device"]
    assert len(device) == 29
    peak = run.report()["memory"][0]["cuda"]["peak_bytes"]
    assert int(device.in_use_bytes.max()) == peak == 721_552_384
    # Host and static memory are listed but not in the level.
    assert cuda[cuda.memory_kind != "device"].in_use_bytes.isna().all()


def test_framework_samples_carry_torchs_totals():
    table = shardscope.load("sample-traces/memory/memory_probe_kineto.json.gz").memory().to_pandas()
    gpu = table[(table.level == "framework") & (table.memory_kind == "device")]
    assert len(gpu) == 409
    assert int(gpu.in_use_bytes.max()) == 419_433_984  # torch.cuda.max_memory_allocated()
    assert int(gpu.reserved_bytes.max()) == 654_311_424  # torch.cuda.max_memory_reserved()
    assert (gpu.bytes.cumsum().iloc[-1] + gpu.in_use_bytes.iloc[0] - gpu.bytes.iloc[0]) == gpu.in_use_bytes.iloc[-1]


def test_memory_figures_table_is_the_reports_memory_section():
    run = shardscope.load("sample-traces/memory/memory_probe_capture.sqlite.gz")
    section = run.report()["memory"]
    figures = run.report_tables()["memory_figures"].to_pandas()
    whole = figures[figures.phase.isna()]
    assert list(whole["rank"]) == [r["rank"] for r in section]
    assert int(whole.peak_bytes.iloc[0]) == section[0]["cuda"]["peak_bytes"] == 721_552_384
    assert int(whole.peak_ns.iloc[0]) == section[0]["cuda"]["peak_ns"]
    assert int(whole.largest_allocation_bytes.iloc[0]) == section[0]["cuda"]["largest_allocations"][0]["bytes"]
    assert len(figures) == sum(1 + len(r["phases"]) for r in section)
    kineto = shardscope.load("sample-traces/memory/memory_probe_kineto.json.gz").report_tables()["memory_figures"]
    kineto = kineto.to_pandas()
    row = kineto[kineto.phase.isna()].iloc[0]
    assert (int(row.peak_allocated_bytes), int(row.peak_reserved_bytes)) == (419_433_984, 654_311_424)
    assert row.peak_bytes is None or row.peak_bytes != row.peak_bytes  # no CUDA level in a Kineto trace
