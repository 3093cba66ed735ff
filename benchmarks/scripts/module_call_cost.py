#!/usr/bin/env python3
"""Host time `capture --torch-modules`' start-up hook adds per module call, on the CPU, inside one process.

Each `--hook NAME=PATH` is a version of the hook (`capture/src/torch_modules/sitecustomize.py` or an older copy);
its `ModuleRanges` wraps torch's `nn.Module._call_impl` the way `register` does, or, for a version from before the
wrapper, registers its global forward hooks. NVTX is replaced by two C built-ins (`id`, `tuple`) so that only the
hook's own Python work is timed. The workload is a `Sequential` of one `Identity` (two module calls) or, with
`--model qwen3`, a 4-layer Qwen3 decoder of width 64 from transformers (one token per forward, no cache). Variants
are timed in short chunks, interleaved with the order rotated, `--chunks` times; the figure is each variant's median
chunk, per module call, minus the median of the plain run.

    python3 benchmarks/scripts/module_call_cost.py --hook now=capture/src/torch_modules/sitecustomize.py \
        --hook before=/tmp/old/sitecustomize.py --chunks 200
"""

import argparse
import importlib.util
import inspect
import json
import statistics
import timeit

import torch


def load(name, path):
    spec = importlib.util.spec_from_file_location(f"hook_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Variant:
    """One way of calling modules: plain, a wrapped `_call_impl`, or global hooks; `on()` puts it in place."""

    TABLES = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_forward_hooks_always_called")

    def __init__(self, plain, hook_file=None, name=""):
        self.plain, self.impl, self.hooks = plain, plain, []
        if hook_file is None:
            return
        ranges = load(name, hook_file).ModuleRanges(torch, None, False)
        ranges.push, ranges.pop = id, tuple
        if hasattr(ranges, "wrap"):
            takes_torch = len(inspect.signature(ranges.wrap).parameters) > 1
            self.impl = ranges.wrap(plain, torch) if takes_torch else ranges.wrap(plain)
        else:  # a version from before the wrapper: global forward hooks
            self.hooks = [(torch.nn.modules.module.register_module_forward_pre_hook, ranges.before),
                          (torch.nn.modules.module.register_module_forward_hook, ranges.after)]

    def on(self):
        module_api = torch.nn.modules.module
        for table in (getattr(module_api, name) for name in self.TABLES if hasattr(module_api, name)):
            table.clear()
        for register, hook in self.hooks:
            register(hook)
        torch.nn.Module._call_impl = self.impl


def workload(model_name):
    """A function running the model once, and the number of module calls it makes."""
    if model_name == "identity":
        model, x = torch.nn.Sequential(torch.nn.Identity()), torch.zeros(1)
        return (lambda: model(x)), 2
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    model, ids = Qwen3ForCausalLM(config).eval(), torch.zeros((1, 1), dtype=torch.long)

    def run():
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)

    return run, sum(1 for _ in model.modules()) - 1  # every module but the decoder's ModuleList is called once


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hook", action="append", default=[], help="NAME=PATH of a sitecustomize.py")
    parser.add_argument("--model", choices=["identity", "qwen3"], default="identity")
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--calls-per-chunk", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    plain = torch.nn.Module._call_impl
    variants = {"plain": Variant(plain)}
    for item in args.hook:
        name, _, path = item.partition("=")
        variants[name] = Variant(plain, path, name)
    run, module_calls = workload(args.model)
    number = max(1, args.calls_per_chunk // module_calls)
    samples = {name: [] for name in variants}
    names = list(variants)
    for chunk in range(args.chunks):
        shift = chunk % len(names)  # the order rotates, so no variant always runs right after another
        for name in names[shift:] + names[:shift]:
            variant = variants[name]
            variant.on()
            samples[name].append(timeit.timeit(run, number=number) / number / module_calls * 1e9)
    variants["plain"].on()
    base = statistics.median(samples["plain"])
    result = {"model": args.model, "module_calls_per_run": module_calls, "chunks": args.chunks,
              "torch": torch.__version__, "ns_per_module_call": {}}
    for name, values in samples.items():
        median = statistics.median(values)
        result["ns_per_module_call"][name] = {"median": round(median, 1), "added": round(median - base, 1)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
