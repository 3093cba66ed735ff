"""A server-like loop around Hugging Face transformers' Qwen3 (random weights) with a profiler switch.

Written as an engine's profiling switch works (vLLM's CUDA profiler mode, SGLang's `/start_profile` with the CUDA
profiler activity): requests are served one after another for the life of the process, and the switch calls
`torch.cuda.profiler.start()` before request FIRST and `torch.cuda.profiler.stop()` after request LAST - 1, for
every window FIRST:LAST in WINDOWS.
Nothing else in the program knows about profiling: no NVTX, no synchronisation around the switch, so the stop is
called while the last request's kernels may still run on the GPU.

Requests alternate between two prompt lengths, so the window holds prefills of different shapes and decode steps.
MODE=eager uses the dynamic KV cache; MODE=static passes `cache_implementation="static"` (transformers compiles
the decode step with torch.compile, mode reduce-overhead: CUDA graphs replayed inside the window).

Environment: MODE (eager|static), REQUESTS (10), WINDOWS (`6:8`; several as `2:4,6:8`), NEW_TOKENS (8), BATCH (2),
PROMPT (256), LAYERS (2). Prints one line `server requests N windows WINDOWS mode MODE elapsed_s S`.
"""

import os
import sys
import time

import torch
from hf_qwen3 import build_model

MODE = os.environ.get("MODE", "eager")
REQUESTS = int(os.environ.get("REQUESTS", "10"))
WINDOWS = os.environ.get("WINDOWS", "6:8")
NEW_TOKENS = int(os.environ.get("NEW_TOKENS", "8"))
BATCH = int(os.environ.get("BATCH", "2"))
PROMPT = int(os.environ.get("PROMPT", "256"))
LAYERS = int(os.environ.get("LAYERS", "2"))


def serve(model, request):
    """One request: a generate call whose prompt length alternates, so shapes differ between requests."""
    length = PROMPT if request % 2 == 0 else PROMPT // 2
    generator = torch.Generator(device="cuda").manual_seed(request)
    prompt = torch.randint(0, 32000, (BATCH, length), device="cuda", generator=generator)
    options = {"cache_implementation": "static"} if MODE == "static" else {}
    with torch.no_grad():
        model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=0,
            **options,
        )


def parse_windows(text):
    """`FIRST:LAST,...` as (first, last) pairs in order, not overlapping, inside 0..REQUESTS."""
    try:
        windows = [tuple(int(n) for n in item.split(":")) for item in text.split(",")]
    except ValueError:
        windows = []
    ends = [n for window in windows for n in window]
    valid = windows and all(len(w) == 2 and w[0] < w[1] for w in windows) and ends == sorted(ends)
    if not valid or ends[0] < 0 or ends[-1] > REQUESTS:
        print(f"hf_server_window: WINDOWS must be FIRST:LAST,... in order inside 0..{REQUESTS}: {text}", file=sys.stderr)
        sys.exit(2)
    return windows


def main():
    if MODE not in ("eager", "static"):
        print(f"hf_server_window: MODE must be eager or static: {MODE}", file=sys.stderr)
        sys.exit(2)
    windows = parse_windows(WINDOWS)
    starts = {first for first, _ in windows}
    stops = {last - 1 for _, last in windows}
    model = build_model(layers=LAYERS, hidden=1024, intermediate=3072, head_dim=64, max_positions=2048)
    started = time.perf_counter()
    for request in range(REQUESTS):
        if request in starts:
            torch.cuda.profiler.start()
        serve(model, request)
        if request in stops:
            torch.cuda.profiler.stop()
    torch.cuda.synchronize()
    elapsed_s = time.perf_counter() - started
    print(f"server requests {REQUESTS} windows {WINDOWS} mode {MODE} elapsed_s {elapsed_s:.3f}", flush=True)


if __name__ == "__main__":
    main()
