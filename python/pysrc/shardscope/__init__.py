"""shardscope from Python: where the GPU time of a sharded run goes.

Traces (shardscope captures, Nsight Systems SQLite exports, Kineto JSON, folders of per-rank files and the Parquet
dataset of ``analyzer export --format parquet``) are read and analysed by shardscope's Rust libraries; this package
hands over their results:

- ``Run.report()`` / ``Run.report_json()``: the report, the same JSON as ``analyzer report --format json``;
- ``Run.report_tables()``: its tables (per-rank and per-phase figures, categories, kernel summary, memory, collective groups);
- ``Run.kernels()``, ``Run.collectives()``, ``Run.instances()``: every kernel, every recorded collective operation and
  every collective instance matched across ranks with each rank's wait and transfer;
- ``Run.what_if(...)``: ``analyzer what-if`` with its tables.
- ``Run.memory()``: every memory event (CUDA-level allocations and framework allocator samples) with the level after
  it; the report's ``memory`` section has the peaks per rank and phase.

Tables are ``pyarrow.Table`` objects handed over through the Arrow C data interface, without copying; pandas
(``table.to_pandas()``) and polars (``polars.from_arrow(table)``) read them. ``shardscope.dask`` runs the analysis of
many ranks on a Dask cluster.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Tuple

from . import _native
from ._native import ShardscopeError

# The error is raised on Dask workers and pickled back to the client by its module and name: name the module that
# defines it under the package, where the client finds it.
ShardscopeError.__module__ = "shardscope._native"

__all__ = ["Options", "Run", "ShardscopeError", "load", "module_rows", "modules", "report", "report_json"]


@dataclass(frozen=True)
class Options:
    """What to analyse and how: the options of ``analyzer report`` under the same names."""

    #: Op-category rules file (TOML), instead of the built-in rules.
    rules: Optional[str] = None
    #: Ranges whose name matches are phases (default: prefill and decode).
    phase_pattern: Optional[str] = None
    #: Ranges whose name matches are steps.
    step_pattern: Optional[str] = None
    #: Only ``(start_ns, end_ns)`` of the trace clock, events clipped to it.
    window_ns: Optional[Tuple[int, int]] = None
    #: Leading steps of each rank left out as warm-up, as ``--skip-steps`` (0: none); ``None``: the warm-up is
    #: detected, as without the flag.
    skip_steps: Optional[int] = None
    #: HTA figures keep the last profiler step.
    hta_include_last_step: bool = False
    #: ``bench`` results (JSON) for bus bandwidth against the machine.
    bench: Optional[str] = None
    #: Analyse inputs that are not one run together (with a note) instead of refusing them.
    allow_mixed: bool = False
    #: Keep every matched collective instance in the report's JSON (``instances``).
    keep_instances: bool = False

    def to_json(self) -> str:
        """The options as the native module reads them."""
        values = {k: v for k, v in asdict(self).items() if v is not None}
        if self.window_ns is not None:
            values["window_ns"] = [int(self.window_ns[0]), int(self.window_ns[1])]
        return json.dumps(values)


def _options(options: Optional[Options], overrides: Dict[str, Any]) -> Options:
    base = options or Options()
    if overrides:
        base = Options(**{**asdict(base), **overrides})
    return base


class Run:
    """The traces of one run, read and analysed once; the report and tables are taken from it."""

    def __init__(self, native: Any, options: Options):
        self._native = native
        self.options = options

    @property
    def inputs(self) -> List[str]:
        """The input files, one per trace."""
        return self._native.inputs()

    def report_json(self) -> str:
        """The report as ``analyzer report --format json`` prints it (without the final newline)."""
        return self._native.report_json()

    def report(self) -> Dict[str, Any]:
        """The report as a dict (the JSON of ``report_json``)."""
        return json.loads(self.report_json())

    def findings(self, rules: Optional[str] = None) -> Dict[str, Any]:
        """What limits the run, ranked by the time removing each cause saves: the JSON of ``analyzer findings``, as
        a dict. ``rules``: a findings rules file, as ``--findings-rules``."""
        return json.loads(self._native.findings(rules))

    def report_tables(self) -> Dict[str, Any]:
        """The report's tables as pyarrow tables: ``rank_figures``, ``categories``, ``kernel_summary``,
        ``memory_figures`` (GPU memory per rank and phase; no rows without memory events), ``collective_groups``."""
        return dict(self._native.report_tables())

    def kernels(self):
        """Every kernel of every rank (pyarrow table)."""
        return self._native.kernels()

    def memory(self):
        """Every memory event of every rank (pyarrow table): ``level`` ``cuda`` rows are the CUDA driver's
        allocations and releases (the caching allocator's segments) with the device's level after each in
        ``in_use_bytes``; ``framework`` rows are the framework allocator's samples (tensors) with its
        ``Total Allocated`` in ``in_use_bytes`` and ``Total Reserved`` in ``reserved_bytes``."""
        return self._native.memory()

    def collectives(self):
        """Every collective operation the traces record, with its kernel's times where known (pyarrow table)."""
        return self._native.collectives()

    def instances(self):
        """Every collective instance matched across ranks, one row per rank taking part, with its wait for the
        last rank and its transfer (pyarrow table)."""
        return self._native.instances()

    def what_if(
        self,
        no_straggler: bool = False,
        comm_overlapped: bool = False,
        scales: Optional[List[str]] = None,
        step: Optional[int] = None,
        window_ns: Optional[Tuple[int, int]] = None,
        comm_at_peak: Optional[str] = None,
    ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """``analyzer what-if``: the report (dict, the CLI's JSON) and its tables (``by_category``, ``by_rank``,
        ``rank_waits``). With no scenario given, the no-straggler replay. ``comm_at_peak`` names ``bench`` results:
        every matched collective transfers at the bus bandwidth measured for its size (``--comm-at-peak``)."""
        text, tables = self._native.what_if(
            no_straggler, comm_overlapped, list(scales or []), step, window_ns, comm_at_peak
        )
        return json.loads(text), dict(tables)


def load(*paths: str, options: Optional[Options] = None, **overrides: Any) -> Run:
    """Reads the traces of one run (files, folders of per-rank files, Parquet datasets) and analyses them.

    Keyword arguments override fields of ``options`` (``load("run.sqlite", window_ns=(a, b))``). A file that cannot
    be used raises ``ShardscopeError`` with one line naming it and the cause.
    """
    chosen = _options(options, overrides)
    return Run(_native.load([str(p) for p in paths], chosen.to_json()), chosen)


def report_json(*paths: str, options: Optional[Options] = None, **overrides: Any) -> str:
    """The report of the run in ``paths``, as ``analyzer report --format json`` prints it."""
    return load(*paths, options=options, **overrides).report_json()


def report(*paths: str, options: Optional[Options] = None, **overrides: Any) -> Dict[str, Any]:
    """The report of the run in ``paths`` as a dict."""
    return json.loads(report_json(*paths, options=options, **overrides))


def modules(*paths: str, depth: Optional[int] = None, phase_pattern: Optional[str] = None,
            skip_steps: Optional[int] = None) -> Dict[str, Any]:
    """GPU time per module path, rank and phase (``analyzer modules --format json``) from module ranges: a capture
    made with ``capture --torch-modules`` or a torch.profiler trace with ``with_modules=True``. ``depth`` folds
    deeper modules into their ancestor at that many path parts. Each phase's leading warm-up instances are left out
    and counted (``warmup_instances``): those found by their length, or the first ``skip_steps`` (0: none)."""
    return json.loads(_native.modules_json([str(p) for p in paths], depth, phase_pattern, skip_steps))


def module_rows(*paths: str, depth: Optional[int] = None, phase_pattern: Optional[str] = None,
                skip_steps: Optional[int] = None) -> List[Dict[str, Any]]:
    """The module tables as flat rows (one per rank, phase and module path), ready for ``pandas.DataFrame``."""
    rows = []
    for rank in modules(*paths, depth=depth, phase_pattern=phase_pattern, skip_steps=skip_steps)["ranks"]:
        for phase in rank["phases"]:
            for row in phase["rows"]:
                memory = row.pop("memory") or {}
                rows.append({"rank": rank["rank"], "phase": phase["phase"], "phase_instances": phase["instances"],
                             "phase_warmup_instances": phase["warmup_instances"], **row, **memory})
    return rows
