#!/usr/bin/env python3
"""Checks a .pftrace written by shardscope against Perfetto's own tooling.

Two independent checks, using the `perfetto` Python package (`pip install perfetto`):

0. Schema of the subset: every field declared in proto/perfetto_subset.proto must have the
   same number and type as the field of the same name in Perfetto's official schema.
1. Schema of the file: the file is parsed with Perfetto's official protobuf classes
   (`perfetto.protos...perfetto_trace_pb2`), and every message at every depth must have no
   unknown fields; a wrong field number or wire type in our subset of the schema would show up
   here. Slices are then rebuilt (begin/end per track, interned names per sequence, flows) and
   counted per kind of track.
2. trace_processor (with --trace-processor): the file is loaded into Perfetto's
   trace_processor and the counts are taken with SQL, and its `stats` table must report no
   import errors or data loss. The package downloads the trace_processor binary on first use;
   without network access this step fails and says so.

With --sqlite NSYS_EXPORT the expected counts are read from the Nsight Systems SQLite file the
trace came from (kernels, copies + sets, runtime/driver calls, NVTX ranges) and compared.

    python3 scripts/check_perfetto_export.py OUT.pftrace [--sqlite tp2.sqlite] [--trace-processor]
"""

import argparse
import collections
import os
import re
import sqlite3
import sys

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.unknown_fields import UnknownFieldSet
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

SLICE_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
SLICE_END = pb.TrackEvent.TYPE_SLICE_END
CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED


PROTO_FIELD = re.compile(r"^\s*(?:optional |repeated )?([A-Za-z0-9_.]+) ([a-z_0-9]+) = (\d+)")


def check_subset_proto(path):
    """Compares every field of our .proto subset with Perfetto's own descriptor of that message."""
    scalar_types = {
        FieldDescriptor.TYPE_UINT64: "uint64",
        FieldDescriptor.TYPE_UINT32: "uint32",
        FieldDescriptor.TYPE_INT64: "int64",
        FieldDescriptor.TYPE_INT32: "int32",
        FieldDescriptor.TYPE_BOOL: "bool",
        FieldDescriptor.TYPE_STRING: "string",
        FieldDescriptor.TYPE_BYTES: "bytes",
        FieldDescriptor.TYPE_DOUBLE: "double",
        FieldDescriptor.TYPE_FIXED64: "fixed64",
    }
    messages = []  # stack of (name, is_message)
    checked = 0
    with open(path) as f:
        for line in f:
            line = line.split("//")[0]
            opened = re.match(r"^\s*(message|enum|oneof) (\w+) \{", line)
            if opened:
                messages.append((opened.group(2), opened.group(1)))
                continue
            if line.strip() == "}":
                messages.pop()
                continue
            field = PROTO_FIELD.match(line)
            if not field or not messages or messages[-1][1] == "enum":
                continue
            type_name, name, number = field.group(1), field.group(2), int(field.group(3))
            owner = [n for n, kind in messages if kind == "message"]
            descriptor = pb.DESCRIPTOR.message_types_by_name[owner[0]]
            for nested in owner[1:]:
                descriptor = descriptor.nested_types_by_name[nested]
            official = descriptor.fields_by_name.get(name)
            assert official is not None, f"{'.'.join(owner)}.{name}: not in Perfetto's schema"
            assert official.number == number, f"{'.'.join(owner)}.{name}: number {number}, Perfetto {official.number}"
            if official.type in scalar_types:
                assert scalar_types[official.type] == type_name, f"{'.'.join(owner)}.{name}: {type_name}"
            else:
                official_type = (official.message_type or official.enum_type).name
                assert type_name.split(".")[-1] == official_type, f"{'.'.join(owner)}.{name}: {type_name}"
            checked += 1
    return checked


def unknown_fields(message, path="packet"):
    """Paths of every message below `message` (inclusive) that holds fields the schema lacks."""
    found = []
    if len(UnknownFieldSet(message)):
        found.append(path)
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        values = value if field.is_repeated else [value]
        for item in values:
            found.extend(unknown_fields(item, f"{path}.{field.name}"))
    return found


def track_kind(tracks, uuid):
    """process, thread, gpu (a GPU group or a row under one), or other."""
    track = tracks.get(uuid)
    if track is None:
        return "other"
    if track.HasField("process"):
        return "process"
    if track.HasField("thread"):
        return "thread"
    if track.name.startswith("GPU "):
        return "gpu_group"
    parent = track.parent_uuid if track.HasField("parent_uuid") else None
    if parent is not None and track_kind(tracks, parent) == "gpu_group":
        return "gpu"
    if parent is not None and track_kind(tracks, parent) == "process":
        # Start/end ranges and overlap rows of threads: CPU-side rows.
        return "thread"
    return "other"


def check_schema(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    bad = []
    tracks = {}
    names = collections.defaultdict(dict)  # sequence -> iid -> name
    open_slices = collections.defaultdict(list)
    slices = []
    for index, packet in enumerate(trace.packet):
        bad.extend(f"#{index} {p}" for p in unknown_fields(packet))
        sequence = packet.trusted_packet_sequence_id
        if packet.sequence_flags & CLEARED:
            names[sequence] = {}
        for entry in packet.interned_data.event_names:
            names[sequence][entry.iid] = entry.name
        if packet.HasField("track_descriptor"):
            tracks[packet.track_descriptor.uuid] = packet.track_descriptor
        elif packet.HasField("track_event"):
            event = packet.track_event
            if event.type == SLICE_BEGIN:
                name = names[sequence][event.name_iid] if event.HasField("name_iid") else event.name
                open_slices[event.track_uuid].append(
                    (packet.timestamp, name, list(event.flow_ids), list(event.terminating_flow_ids))
                )
            elif event.type == SLICE_END:
                start, name, flows_out, flows_in = open_slices[event.track_uuid].pop()
                assert packet.timestamp >= start, f"slice {name} ends before it starts"
                slices.append((event.track_uuid, start, packet.timestamp, name, flows_out, flows_in))
    if bad:
        sys.exit(f"unknown fields (schema mismatch): {bad[:5]} ... ({len(bad)} in all)")
    assert not any(open_slices.values()), "slices left open"
    per_kind = collections.Counter(track_kind(tracks, s[0]) for s in slices)
    gpu = [s for s in slices if track_kind(tracks, s[0]) == "gpu"]
    memops = sum(1 for s in gpu if s[3].startswith("[CUDA mem"))
    flow_starts = {f for s in slices for f in s[4]}
    linked_kernels = sum(1 for s in gpu if not s[3].startswith("[CUDA mem") for f in s[5] if f in flow_starts)
    counts = {
        "packets": len(trace.packet),
        "tracks": len(tracks),
        # GPU rows also hold GPU-side annotation ranges (Kineto); nsys exports have none.
        "kernels": len(gpu) - memops,
        "memops": memops,
        "cpu_slices": per_kind["thread"],
        "other_slices": per_kind["other"],
        "linked_kernels": linked_kernels,
        "process_tracks": sorted(t.process.process_name for t in tracks.values() if t.HasField("process")),
    }
    return counts


def expected_from_sqlite(path):
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}

    def count(sql, table):
        return db.execute(sql).fetchone()[0] if table in tables else 0

    kernels = count("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_KERNEL")
    memops = count("select count(*) from CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMCPY") + count(
        "select count(*) from CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_MEMSET"
    )
    calls = count("select count(*) from CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_RUNTIME") + count(
        "select count(*) from CUPTI_ACTIVITY_KIND_DRIVER", "CUPTI_ACTIVITY_KIND_DRIVER"
    )
    # NVTX push/pop (59) and start/end (60) ranges with an end.
    ranges = count("select count(*) from NVTX_EVENTS where eventType in (59, 60) and end is not null", "NVTX_EVENTS")
    return {"kernels": kernels, "memops": memops, "cpu_slices": calls + ranges}


def check_trace_processor(path):
    from perfetto.trace_processor import TraceProcessor

    tp = TraceProcessor(trace=path)

    def one(sql):
        return next(iter(tp.query(sql))).__dict__

    result = {
        "slices": one("select count(*) as n from slice")["n"],
        "flows": one("select count(*) as n from flow")["n"],
        "thread_slices": one("select count(*) as n from thread_track join slice on slice.track_id = thread_track.id")[
            "n"
        ],
        "processes_with_name": one("select count(*) as n from process where name like 'rank %'")["n"],
    }
    errors = [
        (row.name, row.idx, row.value)
        for row in tp.query("select name, idx, value from stats where severity in ('error', 'data_loss') and value > 0")
    ]
    tp.close()
    return result, errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pftrace")
    parser.add_argument("--sqlite", help="the Nsight Systems SQLite export the trace came from")
    parser.add_argument("--trace-processor", action="store_true", help="also load the file into trace_processor")
    args = parser.parse_args()

    subset = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto", "perfetto_subset.proto")
    print(f"subset schema: {check_subset_proto(subset)} fields match Perfetto's numbers and types")
    counts = check_schema(args.pftrace)
    print("schema check: no unknown fields;", counts)
    failed = False
    if args.sqlite:
        expected = expected_from_sqlite(args.sqlite)
        for key, value in expected.items():
            status = (
                "ok" if counts[key] + (counts["other_slices"] if key == "cpu_slices" else 0) == value else "MISMATCH"
            )
            failed |= status != "ok"
            print(f"  {key}: written {counts[key]}, SQLite {value}: {status}")
    if args.trace_processor:
        try:
            result, errors = check_trace_processor(args.pftrace)
        except Exception as error:  # noqa: BLE001 - any failure to start it is reported, not fatal
            print(f"trace_processor unavailable: {type(error).__name__}: {str(error).splitlines()[0][:200]}")
        else:
            print("trace_processor:", result, "import errors:", errors or "none")
            failed |= bool(errors)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
