"""One program, two module views: the random-weight Qwen3 decoder of `qwen3_decode.py` (transformers, eager decode
with a dynamic KV cache, one GPU), run either plain (for `capture --torch-modules`) or under torch.profiler with
`with_modules=True, with_stack=True` (its Kineto trace), so that `analyzer modules` of the two files can be
compared: `benchmarks/scripts/modules_compare.py` does that.

Both runs do the same work: a warm-up pass (prefill and DECODE decode steps), then the recorded pass (the same
again). Each decode step is inside an NVTX range `decode` (the capture's phase) and a `record_function("decode")`
(torch.profiler's phase: it records no NVTX). Run plain, the recorded pass is between `torch.cuda.profiler.start()` and
`stop()`, so `capture --cuda-profiler-api` records it alone; under torch.profiler only the recorded pass is
profiled. torch.profiler and capture cannot share a process (one CUPTI subscriber), so they are two runs:

  capture -o modules.sqlite --torch-modules --cuda-profiler-api -- python3 workloads/modules_vs_torch_profiler.py
  python3 workloads/modules_vs_torch_profiler.py --torch-profiler kineto.json

Model size and steps come from the environment as in `qwen3_decode.py`: LAYERS (4), HIDDEN (1024), PROMPT (64),
DECODE (32), ATTN (attention implementation). Prints one JSON line: {"mode", "decode_steps", "pass_ms" (wall
time of the recorded pass, prefill included), "trace"}.
"""

import argparse
import contextlib
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_decode  # noqa: E402  (the same model, built the same way)


def profiler(path):
    """torch.profiler as its module view needs it: an eager model's hierarchy comes from the Python tracer."""
    if not path:
        return contextlib.nullcontext()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    return torch.profiler.profile(activities=activities, with_modules=True, with_stack=True)


@contextlib.contextmanager
def phase(name):
    """A phase range both recorders see: NVTX for the capture, a record_function for torch.profiler."""
    torch.cuda.nvtx.range_push(name)
    try:
        with torch.profiler.record_function(name):
            yield
    finally:
        torch.cuda.nvtx.range_pop()


def decode_pass(config, model, ids):
    """A prefill, then DECODE single-token steps with a dynamic cache."""
    with phase("prefill"):
        out = model(input_ids=ids, use_cache=True)
    cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
    for _ in range(qwen3_decode.DECODE):
        with phase("decode"):
            token = model(input_ids=token, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
    return token


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torch-profiler", metavar="TRACE_JSON",
                        help="record the second pass with torch.profiler and write its Chrome trace here")
    args = parser.parse_args()
    config, model = qwen3_decode.build()
    ids = torch.randint(0, config.vocab_size, (1, qwen3_decode.PROMPT), device="cuda")
    with torch.no_grad():
        decode_pass(config, model, ids)  # warm-up
        torch.cuda.synchronize()
        # The CUDA profiler switch only where capture listens for it: torch.profiler records its own span.
        switch = not args.torch_profiler
        with profiler(args.torch_profiler) as prof:
            if switch:
                torch.cuda.profiler.start()
            start = time.perf_counter()
            decode_pass(config, model, ids)
            torch.cuda.synchronize()
            total_ms = (time.perf_counter() - start) * 1e3
            if switch:
                torch.cuda.profiler.stop()
    if prof is not None:
        prof.export_chrome_trace(args.torch_profiler)
    mode = "torch.profiler" if args.torch_profiler else "plain"
    print(json.dumps({"mode": mode, "decode_steps": qwen3_decode.DECODE,
                      "pass_ms": total_ms, "trace": args.torch_profiler}), flush=True)


if __name__ == "__main__":
    main()
