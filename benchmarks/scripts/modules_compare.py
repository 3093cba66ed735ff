#!/usr/bin/env python3
"""Compares the module views of two traces of one program: how each splits the GPU time of the decoder layers into
the projections (q/k/v/o_proj, gate/up/down_proj), attention, norms, the rest of the MLP and the layer's own
kernels, and by how many percentage points the two splits differ (the target: every part within 5 pp).

Meant for a `capture --torch-modules` capture and torch.profiler's `with_modules=True, with_stack=True` trace of
the same run (`workloads/modules_vs_torch_profiler.py`), but any two traces with module ranges will do. Each file
goes through `ANALYZER modules --format json` (innermost modules, the built-in phase pattern); only rows of the
phase `--phase` (default `decode`; `all` for every phase) count.

Where a row sits is read from its path below the layer, whichever recorder named it: the capture names modules by
their attribute (`self_attn.q_proj`), torch.profiler by class and instance number (`Qwen3Attention_0.Linear_1`).
torch.profiler numbers the instances of a class in the order it first sees them called, so the Linear children of
one attention module, in number order, are q_proj, k_proj, v_proj and o_proj, and those of one MLP gate_proj,
up_proj and down_proj: the order in which Qwen3's (and Llama's) forward calls them. A parent with another number
of Linear children has them counted as `other_proj`.

  python3 benchmarks/scripts/modules_compare.py --analyzer target/release/analyzer capture.sqlite kineto.json \\
      [--phase decode] [--out compare.json]

Prints one table (shares of decoder-layer GPU time per file, and the difference) and writes the same as JSON with
--out. Exit status 0 when every part is within the target, 1 when one is not, 2 on bad input.
"""

import argparse
import json
import re
import subprocess
import sys

PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PARTS = PROJECTIONS + ["other_proj", "attention", "norms", "mlp", "layer", "other"]
# Sums shown beside the parts: every projection together, and attention with its projections.
GROUPS = {
    "projections": PROJECTIONS + ["other_proj"],
    "attention_block": ["q_proj", "k_proj", "v_proj", "o_proj", "attention"],
    "mlp_block": ["gate_proj", "up_proj", "down_proj", "mlp"],
}
ATTENTION_ORDER = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP_ORDER = ["gate_proj", "up_proj", "down_proj"]
# torch.profiler's module names: `Linear_12` is instance 12 of the class Linear.
INSTANCE = re.compile(r"^(?P<cls>.+)_(?P<number>\d+)$")


class BadInput(Exception):
    """One line naming the file and what is wrong with it."""


def is_attention(name):
    name = name.lower()
    return "attn" in name or "attention" in name


def is_mlp(name):
    return "mlp" in name.lower()


def linear_number(name):
    """The instance number of a torch.profiler `Linear_N` part, else None."""
    match = INSTANCE.match(name)
    return int(match["number"]) if match and match["cls"] == "Linear" else None


def linear_names(paths):
    """Names for torch.profiler's Linear modules, by their order under one parent: {full path: projection}."""
    children = {}
    for path in paths:
        parent, _, last = path.rpartition(".")
        number = linear_number(last)
        if number is not None:
            children.setdefault(parent, set()).add(number)
    names = {}
    for parent, numbers in children.items():
        last = parent.rpartition(".")[2]
        order = sorted(numbers)
        if is_attention(last) and len(order) == len(ATTENTION_ORDER):
            given = ATTENTION_ORDER
        elif is_mlp(last) and len(order) == len(MLP_ORDER):
            given = MLP_ORDER
        else:
            given = ["other_proj"] * len(order)
        for number, name in zip(order, given):
            names[f"{parent}.Linear_{number}"] = name
    return names


def part_of(path, within_layer, linears):
    """The part of a decoder layer a module row belongs to."""
    names = [p for p in within_layer.split(".") if p]
    if not names:
        return "layer"
    last = names[-1]
    if path in linears:
        return linears[path]
    bare = last.lower()
    if bare in PROJECTIONS:
        return bare
    if "norm" in bare:
        return "norms"
    if bare.endswith("_proj") or linear_number(last) is not None:
        return "other_proj"
    if any(is_mlp(n) for n in names):
        return "mlp"
    if any(is_attention(n) for n in names):
        return "attention"
    return "other"


def modules_report(analyzer, trace):
    """`analyzer modules --format json` of one trace."""
    try:
        done = subprocess.run([analyzer, "modules", "--format", "json", trace], capture_output=True, text=True,
                              check=False)
    except OSError as error:
        raise BadInput(f"{analyzer}: cannot run the analyzer: {error}") from error
    if done.returncode != 0:
        cause = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise BadInput(f"{trace}: analyzer modules failed: {cause}")
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError as error:
        raise BadInput(f"{trace}: analyzer modules printed no JSON: {error}") from error


def split(report, phase, name):
    """Decoder-layer GPU time per part (all ranks together) in the phase `phase` ('all': every phase)."""
    rows, phase_ns, phases = [], 0, set()
    for rank in report["ranks"]:
        for entry in rank["phases"]:
            phases.add(entry["phase"])
            if phase != "all" and entry["phase"] != phase:
                continue
            phase_ns += entry["gpu_ns"]
            rows.extend(entry["rows"])
    if not rows:
        raise BadInput(f"{name}: no rows in phase '{phase}' (phases: {', '.join(sorted(phases)) or 'none'})")
    linears = linear_names(row["path"] for row in rows if row["layer"] is not None)
    parts_ns = dict.fromkeys(PARTS, 0)
    layers, layer_ns, unattributed_ns = set(), 0, 0
    for row in rows:
        if row["path"] == "(no module)":
            unattributed_ns += row["gpu_ns"]
        if row["layer"] is None:
            continue
        layers.add(row["layer"])
        layer_ns += row["gpu_ns"]
        parts_ns[part_of(row["path"], row["within_layer"], linears)] += row["gpu_ns"]
    if layer_ns == 0:
        raise BadInput(f"{name}: no kernel time inside decoder layers in phase '{phase}'")
    shares = {part: ns / layer_ns for part, ns in parts_ns.items()}
    shares.update({group: sum(shares[p] for p in members) for group, members in GROUPS.items()})
    return {
        "phase": phase,
        "phase_gpu_ns": phase_ns,
        "layers": len(layers),
        "decoder_layer_gpu_ns": layer_ns,
        "layer_share_of_phase": layer_ns / phase_ns if phase_ns else None,
        "unattributed_share_of_phase": unattributed_ns / phase_ns if phase_ns else None,
        "parts_ns": parts_ns,
        "shares": shares,
    }


def compare(first, second, target_pp):
    """Per part and group: the difference in percentage points (second minus first)."""
    keys = PARTS + list(GROUPS)
    gaps = {key: (second["shares"][key] - first["shares"][key]) * 100 for key in keys}
    largest = max(abs(gaps[key]) for key in PARTS)
    return {"difference_pp": gaps, "largest_part_gap_pp": largest, "target_pp": target_pp,
            "within_target": largest <= target_pp}


def table(names, splits, result):
    """The comparison as text: one line per part and group."""
    first, second = splits
    lines = [f"decoder-layer GPU time by part, phase '{first['phase']}'",
             f"  A: {names[0]}: {first['layers']} layers, {first['decoder_layer_gpu_ns'] / 1e6:.3f} ms in layers, "
             f"{100 * (first['layer_share_of_phase'] or 0):.1f} % of the phase",
             f"  B: {names[1]}: {second['layers']} layers, {second['decoder_layer_gpu_ns'] / 1e6:.3f} ms in layers, "
             f"{100 * (second['layer_share_of_phase'] or 0):.1f} % of the phase",
             f"  {'part':<18} {'A %':>8} {'B %':>8} {'B-A pp':>8}"]
    for key in PARTS + list(GROUPS):
        if key in GROUPS:
            label = f"= {key}"
        elif first["parts_ns"][key] == 0 and second["parts_ns"][key] == 0:
            continue
        else:
            label = key
        lines.append(f"  {label:<18} {100 * first['shares'][key]:>8.2f} {100 * second['shares'][key]:>8.2f} "
                     f"{result['difference_pp'][key]:>+8.2f}")
    verdict = "within" if result["within_target"] else "NOT within"
    lines.append(f"largest part gap {result['largest_part_gap_pp']:.2f} pp: {verdict} the {result['target_pp']:g} pp "
                 "target")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--analyzer", default="analyzer", help="the analyzer binary (default: analyzer on PATH)")
    parser.add_argument("--phase", default="decode", help="phase to compare, or 'all' (default: decode)")
    parser.add_argument("--target-pp", type=float, default=5.0, help="largest allowed gap per part (default 5)")
    parser.add_argument("--out", help="also write the comparison here as JSON")
    parser.add_argument("first", help="trace A (e.g. the capture with --torch-modules)")
    parser.add_argument("second", help="trace B (e.g. torch.profiler's trace of the same program)")
    args = parser.parse_args()
    names = [args.first, args.second]
    try:
        splits = [split(modules_report(args.analyzer, name), args.phase, name) for name in names]
    except BadInput as error:
        print(f"modules_compare: {error}", file=sys.stderr)
        return 2
    result = compare(splits[0], splits[1], args.target_pp)
    print(table(names, splits, result))
    if args.out:
        with open(args.out, "w") as file:
            json.dump({"files": dict(zip(names, splits)), **result}, file, indent=1)
            file.write("\n")
    return 0 if result["within_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
