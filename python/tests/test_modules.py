"""Module tables from the package against `analyzer modules`, on the bundled Qwen3 capture made with
`capture --torch-modules=memory`."""

import json

import shardscope

EAGER = "sample-traces/modules/qwen3_eager.sqlite.gz"


def test_module_tables_are_the_clis(cli):
    for depth in (None, 3):
        args = ["modules", "--format", "json", EAGER] + (["--module-depth", str(depth)] if depth is not None else [])
        assert shardscope.modules(EAGER, depth=depth) == json.loads(cli(*args))


def test_warmup_is_left_out_as_the_cli_leaves_it_out(cli):
    detected = shardscope.modules(EAGER)
    decode = next(p for p in detected["ranks"][0]["phases"] if p["phase"] == "decode")
    # The workload's first pass over the 32 decode steps is its warm-up: each step there is about 8 times as long.
    assert (decode["instances"], decode["warmup_instances"], decode["warmup"]) == (32, 32, "detected")
    kept = shardscope.modules(EAGER, skip_steps=0)
    assert kept == json.loads(cli("modules", "--format", "json", "--skip-steps", "0", EAGER))
    decode_all = next(p for p in kept["ranks"][0]["phases"] if p["phase"] == "decode")
    assert (decode_all["instances"], decode_all["warmup_instances"]) == (64, 0)
    assert decode_all["gpu_ns"] == decode["gpu_ns"] + decode["warmup_gpu_ns"]


def test_rows_add_up_to_each_phase():
    tables = shardscope.modules(EAGER, depth=3)
    rows = shardscope.module_rows(EAGER, depth=3)
    for rank in tables["ranks"]:
        for phase in rank["phases"]:
            mine = [r for r in rows if r["rank"] == rank["rank"] and r["phase"] == phase["phase"]]
            assert sum(r["gpu_ns"] for r in mine) == phase["gpu_ns"]
    assert any(r.get("calls_measured") for r in rows), "the capture recorded allocator counters"
