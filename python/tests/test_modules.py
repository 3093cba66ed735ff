"""Module tables from the package against `analyzer modules`, on the bundled Qwen3 capture made with
`capture --torch-modules=memory`."""

import json

import shardscope

EAGER = "sample-traces/modules/qwen3_eager.sqlite.gz"


def test_module_tables_are_the_clis(cli):
    for depth in (None, 3):
        args = ["modules", "--format", "json", EAGER] + (["--module-depth", str(depth)] if depth is not None else [])
        assert shardscope.modules(EAGER, depth=depth) == json.loads(cli(*args))


def test_rows_add_up_to_each_phase():
    tables = shardscope.modules(EAGER, depth=3)
    rows = shardscope.module_rows(EAGER, depth=3)
    for rank in tables["ranks"]:
        for phase in rank["phases"]:
            mine = [r for r in rows if r["rank"] == rank["rank"] and r["phase"] == phase["phase"]]
            assert sum(r["gpu_ns"] for r in mine) == phase["gpu_ns"]
    assert any(r.get("calls_measured") for r in rows), "the capture recorded allocator counters"
