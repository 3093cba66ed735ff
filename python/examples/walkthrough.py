# %% [markdown]
# # shardscope from Python: a walkthrough
#
# Run it cell by cell in an editor that knows `# %%` cells (VS Code, Jupyter with jupytext), or as a script from
# the repository root: `python python/examples/walkthrough.py`. It needs the package (`pip install ./python`) and
# pandas and polars for the last cells.

# %%
import json

import polars as pl

import shardscope

# The two-rank sample run: a tensor-parallel decoder on 2 GPUs whose rank 1 was made late on purpose.
run = shardscope.load("sample-traces/tp2_skew_capture.sqlite.gz")
run.inputs

# %% [markdown]
# ## The report
# `report()` is the JSON of `analyzer report --format json` as a dict: per rank, the span, the GPU busy time, the
# op categories, communication and how much of it was waiting for the last rank.

# %%
report = run.report()
for rank in report["ranks"]:
    print(rank["rank"], rank["gpu_busy_ns"], rank["comm_wait_ns"], rank["comm_transfer_ns"], rank["late_count"])

# %% [markdown]
# ## Its tables, as Arrow
# Every table is a `pyarrow.Table` handed over without copying; pandas and polars read it.

# %%
tables = run.report_tables()
categories = pl.from_arrow(tables["categories"])
print(categories.filter(pl.col("phase").is_null()).sort("duration_ns", descending=True).head(8))

# %% [markdown]
# ## Kernels and collectives
# Every kernel with its op category, and every collective instance matched across ranks with each rank's wait for
# the last one and its transfer.

# %%
kernels = run.kernels().to_pandas()
print(kernels.groupby(["rank", "category"]).duration_ns.sum().unstack(0).head(10))

instances = pl.from_arrow(run.instances())
print(instances.group_by("rank").agg(pl.col("wait_ns").sum(), pl.col("late").sum()))

# %% [markdown]
# ## What if the late rank were not late?
# `what_if` replays one step of the dependency model without stragglers, as `analyzer what-if` does. Where the model
# does not reproduce the measured step, it gives no slowdown (`null`) and says why in `fit.problems`.

# %%
result, what_if_tables = run.what_if(no_straggler=True, step=3)
if result["slowdown"] is None:
    print("no slowdown for step 3:", "; ".join(result["fit"]["problems"]))
else:
    print(json.dumps({k: result[k] for k in ("measured_ns", "ideal_ns", "slowdown")}))
print(what_if_tables["by_rank"].to_pandas())

# %% [markdown]
# ## What to fix first
# `findings()` ranks what limits the run, each cause with the time removing it saves in the replayed model, as
# `analyzer findings` does (docs/findings.md).

# %%
for finding in run.findings()["findings"]:
    print(finding["kind"], finding["saving_per_run_ns"], finding["title"])

# %% [markdown]
# ## Many ranks: Dask
# `shardscope.dask.analyze` reads and analyses every input on a Dask worker, matches the collectives as a keyed
# reduction and gives the same JSON less its `findings` (they replay the whole run's dependency model, which needs
# every trace in one place: `run.findings()`); without a client it starts a `LocalCluster`. From a shell:
# `python -m shardscope.dask --workers 4 -o out/ traces/` writes `report.json` and the tables as Parquet.

# %%
from distributed import Client, LocalCluster

from shardscope import dask as shardscope_dask

# Two workers as threads of this process (the native code releases the GIL): a script or notebook that starts
# worker processes instead is imported again by each of them, unless its code sits under `if __name__ == "__main__"`.
with LocalCluster(n_workers=2, processes=False, dashboard_address=None) as cluster, Client(cluster) as client:
    # The Kineto sample: one file per rank, so each rank is read by a task of its own.
    text = shardscope_dask.analyze_json(["sample-traces/kineto_tp2"], client=client)
whole = shardscope.load("sample-traces/kineto_tp2").report()
whole.pop("findings")
assert json.loads(text) == whole
print(json.loads(text)["collectives"]["matched_instances"], "collective instances matched on Dask")
