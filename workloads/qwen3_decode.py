"""A random-weight Qwen3 decoder (transformers) doing a prefill and single-token decode steps, for module tables and
their cost. Nothing here knows about shardscope: `capture --torch-modules` adds the module ranges from outside.

MODE (environment):
  eager   prefill, then DECODE steps with a dynamic KV cache, each step inside an NVTX range `decode`.
  graph   the same with a static KV cache, one decode step captured into a CUDA graph (with the model running
          eagerly) and replayed DECODE times, each replay inside `decode`, as serving engines do (twice: a warm-up
          loop, then the timed one, the cache rewound before each). With eager attention (ATTN=eager) transformers
          5.17's mask copies a CPU tensor during capture, which a graph cannot hold; use SDPA. REPLAY=0 runs the
          same step (same static cache, same positions) launched kernel by kernel instead of replayed: the eager
          program whose module split the replayed one must equal.
  static  `model.generate(..., cache_implementation="static")`: torch.compile and CUDA graphs; generate runs twice,
          the second is timed. A streamer marks the steps: `prefill` until the first token, then each `decode`.
          COMPILE_MODE sets torch.compile's mode (transformers' default, `reduce-overhead`, replays CUDA graphs;
          `default` runs the same compiled code without them).
  hooks-ab  what the module-call hooks present in the process (those `capture --torch-modules` installs) add to
          an eager decode step, measured inside one process: DECODE steps in blocks of AB_BLOCK (4), in pairs of
          one block with the hooks and one with them taken out (the order alternating between pairs), so both
          halves share the process, the clocks and the neighbours. Prints the per-pair ratio (with / without hooks)
          of the forwards' host time and of the blocks' wall time (synchronised at both ends). In a process without
          such hooks both halves are the same (a check of the method).
Other settings: LAYERS (4), HIDDEN (1024), PROMPT (64 tokens), DECODE (32), ATTN (attention implementation,
transformers' default when unset), TORCH_PROF=FILE (record the timed part
with torch.profiler, `with_modules=True, with_stack=True`, and write its Chrome trace there).

Prints one JSON line: {"mode", "decode_steps", "step_ms", "total_ms"} (wall time of the timed decode loop, GPU
synchronised before and after only).
"""

import contextlib
import json
import os
import statistics
import time

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

MODE = os.environ.get("MODE", "eager")
LAYERS = int(os.environ.get("LAYERS", "4"))
HIDDEN = int(os.environ.get("HIDDEN", "1024"))
PROMPT = int(os.environ.get("PROMPT", "64"))
DECODE = int(os.environ.get("DECODE", "32"))
PROFILE = os.environ.get("TORCH_PROF")
REPLAY = os.environ.get("REPLAY", "1") != "0"


def build():
    config = Qwen3Config(
        vocab_size=32000,
        hidden_size=HIDDEN,
        intermediate_size=3 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HIDDEN // 64,
        num_key_value_heads=max(1, HIDDEN // 128),
        head_dim=64,
        max_position_embeddings=4096,
    )
    if os.environ.get("ATTN"):
        config._attn_implementation = os.environ["ATTN"]
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to("cuda", torch.bfloat16).eval()
    return config, model


@contextlib.contextmanager
def nvtx(name):
    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()


def profiled():
    if not PROFILE:
        return contextlib.nullcontext()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    # For an eager model torch.profiler records the module hierarchy only through its Python tracer (with_stack);
    # with_modules alone adds nothing to an eager trace (seen with torch 2.11).
    return torch.profiler.profile(activities=activities, with_modules=True, with_stack=True)


def timed(loop):
    """Runs `loop` (under torch.profiler when asked) between two synchronisations; returns its wall ms."""
    with profiled() as prof:
        torch.cuda.synchronize()
        start = time.perf_counter()
        loop()
        torch.cuda.synchronize()
        total_ms = (time.perf_counter() - start) * 1e3
    if prof is not None:
        prof.export_chrome_trace(PROFILE)
    return total_ms


def eager(config, model):
    ids = torch.randint(0, config.vocab_size, (1, PROMPT), device="cuda")
    with torch.no_grad():
        for _ in range(2):  # warm-up pass, then the timed one
            with nvtx("prefill"):
                out = model(input_ids=ids, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)

            def loop():
                nonlocal token
                for _ in range(DECODE):
                    with nvtx("decode"):
                        token = model(input_ids=token, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)

            total_ms = timed(loop)
    return total_ms


def static_cache(config):
    from transformers import StaticCache

    length = PROMPT + DECODE + 8
    try:
        return StaticCache(config=config, max_cache_len=length)
    except TypeError:
        return StaticCache(config=config, max_batch_size=1, max_cache_len=length, device="cuda", dtype=torch.bfloat16)


def graph(config, model):
    cache = static_cache(config)
    ids = torch.randint(0, config.vocab_size, (1, PROMPT), device="cuda")
    token = torch.zeros((1, 1), dtype=torch.long, device="cuda")
    position = torch.tensor([PROMPT], device="cuda")

    def step():
        out = model(input_ids=token, past_key_values=cache, cache_position=position, position_ids=position[None],
                    use_cache=True)
        return out.logits[:, -1:].argmax(-1)

    with torch.no_grad():
        with nvtx("prefill"):
            out = model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(PROMPT, device="cuda"))
        token.copy_(out.logits[:, -1:].argmax(-1))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(side)
        if REPLAY:
            replay = torch.cuda.CUDAGraph()
            with nvtx("capture"), torch.cuda.graph(replay):
                next_token = step()

        def loop():
            for _ in range(DECODE):
                with nvtx("decode"):
                    if REPLAY:
                        replay.replay()
                        token.copy_(next_token)
                    else:
                        token.copy_(step())
                    position.add_(1)

        rewind(cache, position, PROMPT)
        timed(loop)  # warm-up replays
        rewind(cache, position, PROMPT)
        return timed(loop)


def rewind(cache, position, length):
    """Sets the next decode step's position back to `length`: ours, and the write position transformers 5's static
    cache keeps per layer (`cumulative_length`, a tensor the graph advances on every replay; without this the
    second loop of replays writes past `max_cache_len`, which is what made this mode fail before)."""
    position.fill_(length)
    for layer in getattr(cache, "layers", []):
        counter = getattr(layer, "cumulative_length", None)
        if isinstance(counter, torch.Tensor):
            counter.fill_(length)


class StepRanges:
    """A `generate` streamer that marks its steps as NVTX ranges: `prefill` from the prompt until the first token,
    then `decode` from each token to the next (generate hands the streamer the prompt, then every new token), so
    the compiled decode steps form a phase of their own, as the eager mode's do."""

    def __init__(self):
        self.open = False

    def put(self, _tokens):
        if self.open:
            torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("decode" if self.open else "prefill")
        self.open = True

    def end(self):
        if self.open:
            torch.cuda.nvtx.range_pop()
        self.open = False


def static(config, model):
    ids = torch.randint(0, config.vocab_size, (1, PROMPT), device="cuda")
    compiled = {}
    if os.environ.get("COMPILE_MODE"):
        from transformers import CompileConfig

        compiled["compile_config"] = CompileConfig(mode=os.environ["COMPILE_MODE"])
    with torch.no_grad():
        def run():
            with nvtx("generate"):
                model.generate(ids, max_new_tokens=DECODE, min_new_tokens=DECODE, do_sample=False,
                               cache_implementation="static", streamer=StepRanges(), **compiled)

        run()  # compiles
        return timed(run)


class ModuleCallHooks:
    """Takes out and puts back what a profiler adds to every module call: a wrapped `nn.Module._call_impl` (what
    `capture --torch-modules` installs; the wrapper keeps the original as `__wrapped__`) and torch's global
    module hooks (the tables `register_module_forward_*` fill)."""

    TABLES = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_forward_hooks_always_called")

    def __init__(self):
        module_api = torch.nn.modules.module
        self.tables = [getattr(module_api, name) for name in self.TABLES if hasattr(module_api, name)]
        self.saved = [dict(table) for table in self.tables]
        self.wrapped = torch.nn.Module._call_impl
        self.plain = getattr(self.wrapped, "__wrapped__", self.wrapped)
        self.count = sum(len(saved) for saved in self.saved) + (self.wrapped is not self.plain)

    def set(self, present):
        torch.nn.Module._call_impl = self.wrapped if present else self.plain
        for table, saved in zip(self.tables, self.saved):
            table.clear()
            if present:
                table.update(saved)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def hooks_ab(config, model):
    """Paired blocks of decode steps with and without the module-call hooks; returns the figures as a dictionary.

    Two figures per block of AB_BLOCK steps (4 unless set): the host time of its forwards (each from its call to
    its return, the GPU left to run behind it as in a decode loop) and its wall time from a synchronised start to
    the synchronised end, both per step. Pairs of blocks (with, without), the order alternating between pairs.
    """
    block = int(os.environ.get("AB_BLOCK", "4"))
    hooks = ModuleCallHooks()
    ids = torch.randint(0, config.vocab_size, (1, PROMPT), device="cuda")
    samples = {True: [], False: []}  # per block: (host ns, wall ns), each per step
    with torch.no_grad():
        for warm_up in (True, False):
            out = model(input_ids=ids, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            # The warm-up pass runs as many steps: a forward at a cache length not seen before is ~10x slower on
            # an H100 with torch 2.11 (seen: ~41 against ~4.5 ms per step), so only lengths seen before are timed.
            for index in range(max(2, DECODE // block)):
                present = (index % 2 == 0) == (index // 2 % 2 == 0)  # pairs (with, without), (without, with), ...
                hooks.set(present)
                torch.cuda.synchronize()
                host_ns, started = 0, time.perf_counter_ns()
                for _ in range(block):
                    called = time.perf_counter_ns()
                    with nvtx("decode"):
                        token = model(input_ids=token, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
                    host_ns += time.perf_counter_ns() - called
                torch.cuda.synchronize()
                wall_ns = time.perf_counter_ns() - started
                if not warm_up:
                    samples[present].append((host_ns / block, wall_ns / block))
    hooks.set(True)
    pairs = list(zip(samples[True], samples[False]))
    result = {"mode": MODE, "module_call_hooks": hooks.count, "block_steps": block, "pairs": len(pairs)}
    for index, figure in ((0, "host"), (1, "wall")):
        ratios = [on[index] / off[index] for on, off in pairs]
        result.update({f"step_{figure}_ms_with": statistics.median(s[index] for s in samples[True]) / 1e6,
                       f"step_{figure}_ms_without": statistics.median(s[index] for s in samples[False]) / 1e6,
                       f"{figure}_ratio_median": statistics.median(ratios),
                       f"{figure}_ratio_p10": percentile(ratios, 0.1), f"{figure}_ratio_p90": percentile(ratios, 0.9)})
    return result


def main():
    config, model = build()
    if MODE == "hooks-ab":
        print(json.dumps(hooks_ab(config, model)), flush=True)
        return
    total_ms = {"eager": eager, "graph": graph, "static": static}[MODE](config, model)
    print(json.dumps({"mode": MODE, "decode_steps": DECODE, "step_ms": total_ms / DECODE, "total_ms": total_ms}),
          flush=True)


if __name__ == "__main__":
    main()
