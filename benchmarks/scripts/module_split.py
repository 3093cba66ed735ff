#!/usr/bin/env python3
"""The split of decoder-layer GPU time into projections, attention, norms and MLP, from `analyzer modules --format
json` of one or more traces (a capture with `--torch-modules`, torch.profiler's `with_modules=True` trace), to
compare the two views of one program, or eager decode with graph-replayed decode.

A row's part is read from its path below the layer, whichever recorder named it (`self_attn.q_proj` from the
capture, `Qwen3Attention_0.Linear_1` from torch.profiler): anything inside the MLP is MLP; a norm is a norm; a
linear projection inside attention is a projection; the attention module's own kernels (scores, softmax, rotary,
reshapes) are attention; the layer's own kernels (residual adds) are `layer`.

  python3 benchmarks/scripts/module_split.py --phase decode eager.json kineto.json
"""

import argparse
import json
import sys

PARTS = ["projections", "attention", "norms", "mlp", "layer"]


def part_of(within_layer):
    names = [p.lower() for p in within_layer.split(".") if p]
    if not names:
        return "layer"
    last = names[-1]
    if any("mlp" in n for n in names):
        return "mlp"
    if "norm" in last:
        return "norms"
    in_attention = any("attn" in n or "attention" in n for n in names[:-1])
    if in_attention and (last.endswith("_proj") or last.startswith("linear")):
        return "projections"
    if "attn" in last or "attention" in last:
        return "attention"
    return "layer"


def split(report, phase):
    totals = dict.fromkeys(PARTS, 0)
    phase_ns, unattributed_ns, layer_ns = 0, 0, 0
    for rank in report["ranks"]:
        for entry in rank["phases"]:
            if phase and entry["phase"] != phase:
                continue
            phase_ns += entry["gpu_ns"]
            for row in entry["rows"]:
                if row["path"] == "(no module)":
                    unattributed_ns += row["gpu_ns"]
                if row["layer"] is None:
                    continue
                layer_ns += row["gpu_ns"]
                totals[part_of(row["within_layer"])] += row["gpu_ns"]
    shares = {part: (ns / layer_ns if layer_ns else None) for part, ns in totals.items()}
    return {
        "phase_gpu_ns": phase_ns,
        "decoder_layer_gpu_ns": layer_ns,
        "unattributed_gpu_ns": unattributed_ns,
        "layer_share_of_phase": layer_ns / phase_ns if phase_ns else None,
        "parts_ns": totals,
        "parts_share": shares,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase", help="only this phase (default: all)")
    parser.add_argument("reports", nargs="+", help="`analyzer modules --format json` outputs")
    args = parser.parse_args()
    results = {}
    for path in args.reports:
        with open(path) as file:
            results[path] = split(json.load(file), args.phase)
    json.dump(results, sys.stdout, indent=1)
    print()
    names = list(results)
    if len(names) >= 2:
        first = results[names[0]]["parts_share"]
        for other in names[1:]:
            shares = results[other]["parts_share"]
            gaps = {p: abs((first[p] or 0) - (shares[p] or 0)) * 100 for p in PARTS}
            print(f"{names[0]} vs {other}: largest gap {max(gaps.values()):.2f} pp;",
                  ", ".join(f"{p} {g:.2f} pp" for p, g in gaps.items()))


if __name__ == "__main__":
    main()
