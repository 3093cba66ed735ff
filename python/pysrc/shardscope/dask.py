"""Distributed analysis of a many-rank run on Dask.

Each input file is read and analysed on a worker into report parts (one per trace: its ranks' figures before
collectives are matched, and one small row per communication kernel). The rows are then shuffled by key —
communicator, collective type and sequence number (or position) — into buckets, each bucket matched on a worker
into collective instances and every member's wait and transfer, added up per rank, collective label and phase.
Those sums go back, split by groups of inputs, to tasks that finish those inputs' ranks from their parts (which
travel without their rows); the report is assembled from the finished ranks and the instances. No task holds every
communication kernel of the job, so a worker's memory depends on its inputs and buckets, not on the job's size. The result is the JSON ``analyzer report --format json`` prints for the same files, less its ``findings`` (they
replay the run's dependency model, which needs every trace in one place: ``analyzer findings`` or
``Run.findings()`` give them); with an output folder it is written there with its tables as Parquet.

    python -m shardscope.dask [--scheduler tcp://host:8786] [--workers 4] [-o OUT] TRACE...

Without ``--scheduler`` a ``distributed.LocalCluster`` is started (no set-up); with it, the workers must have this
package installed and see the input paths.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import uuid
from typing import Any, Dict, List, Optional, Sequence

from . import Options, ShardscopeError, _native

__all__ = ["analyze", "expand_inputs", "write_results", "main"]

#: Names of files a folder of per-rank traces holds; a folder with anything else is read whole by one task, so that
#: its members are skipped and counted exactly as ``analyzer`` does.
_TRACE_SUFFIXES = (".sqlite", ".sqlite.gz", ".json", ".json.gz")


def expand_inputs(paths: Sequence[str]) -> List[str]:
    """The inputs one task each reads: a folder of per-rank trace files becomes its files (sorted by name, as the
    analyzer orders them); a file, a Parquet dataset or any other folder stays one input."""
    out: List[str] = []
    for path in paths:
        path = str(path)
        if os.path.isdir(path):
            entries = sorted(os.listdir(path))
            members = [os.path.join(path, e) for e in entries]
            if members and all(os.path.isfile(m) and m.endswith(_TRACE_SUFFIXES) for m in members):
                out.extend(members)
                continue
        out.append(path)
    return out


# --- Tasks (module-level functions, so that workers import them by name). ---
#
# A "pieces" value is what one chunk of inputs gives: per trace in them, (part, header, [rows of bucket 0, 1, …]).


def _pieces(paths: List[str], options: str, buckets: int) -> List[Any]:
    return [trace for path in paths for trace in _native.trace_pieces(path, options, buckets)]


def _headers(pieces: List[Any]) -> List[bytes]:
    return [header for _, header, _ in pieces]


def _parts(pieces: List[Any]) -> List[bytes]:
    return [part for part, _, _ in pieces]


def _bucket(pieces: List[Any], bucket: int) -> List[bytes]:
    return [rows[bucket] for _, _, rows in pieces]


def _with_inputs(first_inputs: List[List[int]], picked: Sequence[List[bytes]]) -> List[Any]:
    """The bucket's rows of every trace, each with the rank input of the trace's first GPU."""
    return [(first, rows) for firsts, per_trace in zip(first_inputs, picked) for first, rows in zip(firsts, per_trace)]


def _differences(first_inputs: List[List[int]], *picked: List[bytes]) -> bytes:
    return _native.bucket_differences(_with_inputs(first_inputs, picked))


def _match(ranks: str, offsets: List[int], keep: bool, group_of_trace: List[int], groups: int,
           first_inputs: List[List[int]], *picked: List[bytes]) -> Any:
    return _native.match_bucket(_with_inputs(first_inputs, picked), ranks, offsets, keep, group_of_trace, groups)


def _instances(matched: Any) -> bytes:
    return matched[0]


def _shares(matched: Any, group: int) -> bytes:
    return matched[1][group]


def _finish(ranks: str, job_has_steps: bool, first_traces: List[int], n_inputs: int, *parts_and_shares: Any) -> List[bytes]:
    """The finished ranks of a group of inputs (each input's traces numbered from its first trace index)."""
    parts, shares = parts_and_shares[:n_inputs], parts_and_shares[n_inputs:]
    numbered = [(first + k, part) for first, per_input in zip(first_traces, parts) for k, part in enumerate(per_input)]
    return _native.finish_traces(numbered, ranks, job_has_steps, list(shares))


def _assemble(options: str, headers: List[bytes], n_groups: int, *finished_and_instances: Any) -> str:
    finished = [trace for group in finished_and_instances[:n_groups] for trace in group]
    return _native.assemble(headers, finished, list(finished_and_instances[n_groups:]), options)


def analyze(paths: Sequence[str], options: Optional[Options] = None, **cluster: Any) -> Dict[str, Any]:
    """The report of the run in ``paths``, computed on Dask, as a dict: what ``Run.report()`` returns for the same
    files. ``cluster``: the keywords of ``analyze_json``."""
    return json.loads(analyze_json(paths, options, **cluster))


def analyze_json(
    paths: Sequence[str],
    options: Optional[Options] = None,
    client: Any = None,
    scheduler: Optional[str] = None,
    workers: int = 2,
    buckets: Optional[int] = None,
    chunks: Optional[int] = None,
    memory_limit: Optional[str] = None,
) -> str:
    """The report JSON of the run in ``paths``, computed on Dask: what ``analyzer report --format json`` prints, less
    its ``findings``.

    ``client``: a ``distributed.Client`` to use; else one for ``scheduler`` (an address), else a ``LocalCluster``
    of ``workers`` single-threaded worker processes, closed afterwards. ``buckets``: how many keyed reductions the
    collective matching is split into (default: twice the workers, or the chunks if more). ``chunks``: how many tasks
    read the input files, each a contiguous run of them (default: four per worker, or one per 128 MiB of stored input
    if more, at most one per file). ``memory_limit``: each ``LocalCluster`` worker's memory (e.g. ``"4GiB"``); past
    60 % of it the worker spills stored results to disk (Dask's default: the machine's memory shared by the workers).
    """
    Client, LocalCluster = _distributed()
    options = options or Options()
    own_client = None
    cluster = None
    if client is None:
        if scheduler:
            client = own_client = Client(scheduler)
        else:
            # The workers' own log of a failed task (with its traceback) is silenced: the failure comes back as the
            # task's exception, one line naming the file.
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                                   silence_logs=logging.CRITICAL, memory_limit=memory_limit or "auto")
            client = own_client = Client(cluster)
    try:
        return _analyze(client, [str(p) for p in paths], options, buckets, chunks)
    finally:
        if own_client is not None:
            own_client.close()
        if cluster is not None:
            cluster.close()


#: Chunks of inputs per worker by default.
_CHUNKS_PER_WORKER = 4
#: Most input bytes (as stored: gzipped JSON, SQLite) one chunk reads by default, so that what a task holds is bounded
#: by the chunk and not by the job.
_CHUNK_INPUT_BYTES = 128 << 20


def _input_bytes(path: str) -> int:
    """Bytes stored under an input (a file, or every file below a folder); 0 where it cannot be read."""
    if os.path.isdir(path):
        return sum(_input_bytes(os.path.join(path, name)) for name in os.listdir(path))
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _default_chunks(inputs: Sequence[str], workers: int) -> int:
    """How many tasks read ``inputs`` by default: four per worker, or more where the job is large, so that no chunk
    reads more than about 128 MiB of stored input; never more than one per input."""
    by_size = -(-sum(_input_bytes(p) for p in inputs) // _CHUNK_INPUT_BYTES)
    return max(1, min(len(inputs), max(_CHUNKS_PER_WORKER * workers, by_size)))


def _analyze(client: Any, paths: List[str], options: Options, buckets: Optional[int], chunks: Optional[int]) -> str:
    if not paths:
        raise ShardscopeError("no inputs")
    opts = options.to_json()
    inputs = expand_inputs(paths)
    # Keys name the stage (as the dashboard groups tasks) and this call, so that two analyses on one client never
    # share a result.
    call = uuid.uuid4().hex[:12]
    n_workers = max(1, len(client.scheduler_info().get("workers", {})))

    # Per chunk of inputs, on the workers: read and analyse each trace alone; its kernel rows split by key into
    # buckets. Inputs go in contiguous chunks, a few per worker (enough to balance the load): every chunk costs
    # one task per bucket further on, and on a job of hundreds of files the scheduling of one task per file and
    # bucket took longer than the analysis. A large job gets more, smaller chunks (see `_default_chunks`), and as many
    # buckets, so that neither a chunk's parts nor a bucket's rows grow with the job.
    n_chunks = max(1, min(len(inputs), chunks or _default_chunks(inputs, n_workers)))
    buckets = max(1, buckets or max(2 * n_workers, n_chunks))
    edges = [len(inputs) * c // n_chunks for c in range(n_chunks + 1)]
    # From here on an input is a chunk of files, and the traces keep their files' order.
    inputs = [inputs[edges[c]:edges[c + 1]] for c in range(n_chunks)]
    pieces = [client.submit(_pieces, chunk, opts, buckets, key=f"parts-{call}-{i}", pure=False) for i, chunk in enumerate(inputs)]
    headers = client.gather([client.submit(_headers, p, key=f"headers-{call}-{i}") for i, p in enumerate(pieces)])
    flat_headers = [header for per_input in headers for header in per_input]
    _native.check_one_run(flat_headers, options.allow_mixed)
    ranks_json = _native.rank_entries(flat_headers)
    ranks = json.loads(ranks_json)
    devices_per_trace: Dict[int, int] = {}
    for entry in ranks:
        devices_per_trace[entry["trace"]] = devices_per_trace.get(entry["trace"], 0) + 1

    # Rank input of each trace's first GPU: traces in input order, GPUs in order.
    first_inputs: List[List[int]] = []
    trace_index = 0
    next_input = 0
    for per_input in headers:
        firsts = []
        for _ in per_input:
            firsts.append(next_input)
            next_input += devices_per_trace.get(trace_index, 0)
            trace_index += 1
        first_inputs.append(firsts)

    # Keyed reduction: each bucket's rows from every input matched on a worker.
    picked = [[client.submit(_bucket, p, b, key=f"bucket-{call}-{b}-{i}") for i, p in enumerate(pieces)] for b in range(buckets)]
    # What finishing a trace needs of its pieces: the part, without kernel rows. Once the buckets and parts are taken
    # from a chunk's pieces they are no longer held (a result stays in a worker's memory while a future names it), and
    # a bucket's rows go once they are matched, so that rows are not kept until the end of the analysis.
    parts = [client.submit(_parts, p, key=f"part-{call}-{i}") for i, p in enumerate(pieces)]
    del pieces
    offsets: List[int] = []
    if _native.hosts_differ(flat_headers):
        differences = client.gather(
            [client.submit(_differences, first_inputs, *column, key=f"clocks-{call}-{b}") for b, column in enumerate(picked)]
        )
        offsets = _native.alignment_offsets(len(ranks), differences)

    # Inputs in contiguous groups (as many as buckets): each group's ranks are finished by one task from its
    # shares of every bucket, so the finished ranks come back in input order group by group.
    groups = max(1, min(buckets, len(inputs)))
    bounds = [len(inputs) * g // groups for g in range(groups + 1)]
    group_of_input = [g for g in range(groups) for _ in range(bounds[g], bounds[g + 1])]
    first_trace_of_input, group_of_trace = [], []
    for i, per_input in enumerate(headers):
        first_trace_of_input.append(len(group_of_trace))
        group_of_trace.extend([group_of_input[i]] * len(per_input))
    matched = [
        client.submit(_match, ranks_json, offsets, options.keep_instances, group_of_trace, groups, first_inputs, *column,
                      key=f"match-{call}-{b}")
        for b, column in enumerate(picked)
    ]
    del picked
    instances = [client.submit(_instances, m, key=f"instances-{call}-{b}") for b, m in enumerate(matched)]
    job_has_steps = _native.job_has_steps(flat_headers)
    finished = []
    for g in range(groups):
        members = range(bounds[g], bounds[g + 1])
        shares = [client.submit(_shares, m, g, key=f"shares-{call}-{b}-{g}") for b, m in enumerate(matched)]
        finished.append(client.submit(_finish, ranks_json, job_has_steps, [first_trace_of_input[i] for i in members],
                                      len(members), *[parts[i] for i in members], *shares, key=f"finish-{call}-{g}"))
    del parts, matched
    report = client.submit(_assemble, opts, flat_headers, groups, *finished, *instances, key=f"assemble-{call}")
    del finished, instances
    return client.gather(report)


def write_results(report_json: str, out: str) -> Dict[str, str]:
    """Writes the report to ``out/report.json`` and its tables as Parquet: ``rank_figures`` (per rank, and per rank
    and phase), ``categories``, ``collective_groups``, ``memory_figures`` when the report has a memory section, and
    ``collective_instances`` when the report keeps them.
    Returns the files written, by table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(out, exist_ok=True)
    report = json.loads(report_json)
    written = {"report": os.path.join(out, "report.json")}
    with open(written["report"], "w", encoding="utf-8") as f:
        f.write(report_json + "\n")

    scalar = ("span_ns", "gpu_busy_ns", "idle_ns", "comm_ns", "exposed_comm_ns", "comm_comp_overlap_pct",
              "comm_over_busy_pct", "exposed_comm_over_span_pct", "comm_wait_ns", "comm_transfer_ns", "late_count",
              "kernel_count", "memop_count", "cuda_graph_count")
    figures, categories = [], []
    for rank in report["ranks"]:
        scopes = [(None, rank)] + list(rank.get("phases", {}).items())
        for phase, values in scopes:
            figures.append({"rank": rank["rank"], "phase": phase, **{k: values.get(k) for k in scalar}})
            categories.extend({"rank": rank["rank"], "phase": phase, "category": c, "duration_ns": ns}
                              for c, ns in values.get("categories", {}).items())
    tables = {
        "rank_figures": figures,
        "categories": categories,
        "collective_groups": [{k: v for k, v in g.items() if k != "late_rank_counts"} for g in report["collectives"]["groups"]],
    }
    if report.get("instances"):
        tables["collective_instances"] = [
            {**{k: v for k, v in i.items() if k != "rank_wait_ns"}, "rank": int(r), "wait_ns": w}
            for i in report["instances"] for r, w in i["rank_wait_ns"].items()
        ]
    for name, rows in tables.items():
        if rows:
            path = os.path.join(out, f"{name}.parquet")
            pq.write_table(pa.Table.from_pylist(rows), path)
            written[name] = path
    # The memory section's table, from the definition `Run.report_tables()` and the dataset export use.
    memory = _native.memory_figures(report_json)
    if memory.num_rows:
        written["memory_figures"] = os.path.join(out, "memory_figures.parquet")
        pq.write_table(memory, written["memory_figures"])
    return written


def _distributed() -> Any:
    """``distributed.Client`` and ``LocalCluster``, or an ImportError that names the extra to install."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as error:
        raise ImportError(f"shardscope.dask needs Dask ({error}): pip install 'shardscope[dask]'") from None
    return Client, LocalCluster


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shardscope.dask", description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", help="trace files, folders of per-rank files, Parquet datasets")
    parser.add_argument("-o", "--out", help="folder for report.json and the Parquet tables (default: JSON on stdout)")
    parser.add_argument("--scheduler", help="address of a running dask-scheduler (default: a LocalCluster)")
    parser.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes (default 2)")
    parser.add_argument("--buckets", type=int, help="keyed reductions of the matching (default: 2 per worker, or "
                                                       "the chunks if more)")
    parser.add_argument("--chunks", type=int, help="tasks reading the input files (default: 4 per worker, or one per "
                                                      "128 MiB of input if more)")
    parser.add_argument("--memory-limit", help="memory of each LocalCluster worker, e.g. 4GiB; past 60 %% of it the "
                                               "worker spills to disk (default: the machine's, shared)")
    parser.add_argument("--window", help="START_NS:END_NS of the trace clock")
    parser.add_argument("--rules", help="op-category rules file")
    parser.add_argument("--phase-pattern")
    parser.add_argument("--step-pattern")
    parser.add_argument("--skip-steps", type=int, default=None)
    parser.add_argument("--bench", help="bench results JSON")
    parser.add_argument("--allow-mixed", action="store_true")
    parser.add_argument("--keep-instances", action="store_true", help="keep every matched instance in the report")
    args = parser.parse_args(argv)
    try:
        _distributed()
    except ImportError as error:
        print(error, file=sys.stderr)
        return 2
    window = None
    if args.window:
        try:
            start, end = (int(x) for x in args.window.split(":"))
        except ValueError:
            print(f"shardscope.dask: --window: {args.window!r} is not START_NS:END_NS", file=sys.stderr)
            return 2
        window = (start, end)
    if args.memory_limit:
        from dask.utils import parse_bytes

        try:
            parse_bytes(args.memory_limit)
        except ValueError:
            print(f"shardscope.dask: --memory-limit: {args.memory_limit!r} is not a size such as 4GiB", file=sys.stderr)
            return 2
    options = Options(rules=args.rules, phase_pattern=args.phase_pattern, step_pattern=args.step_pattern,
                      window_ns=window, skip_steps=args.skip_steps, bench=args.bench, allow_mixed=args.allow_mixed,
                      keep_instances=args.keep_instances)
    try:
        text = analyze_json(args.traces, options, scheduler=args.scheduler, workers=args.workers, buckets=args.buckets,
                       chunks=args.chunks, memory_limit=args.memory_limit)
    except ShardscopeError as error:
        print(f"shardscope.dask: {error}", file=sys.stderr)
        return 2
    if args.out:
        for name, path in write_results(text, args.out).items():
            print(f"{name}: {path}", file=sys.stderr)
    else:
        try:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader went away (`| head`): as `analyzer` does, stop quietly. Python would report the failed flush
            # again at exit, so its stdout goes to /dev/null first.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
