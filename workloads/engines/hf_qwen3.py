"""Hugging Face transformers' own Qwen3 code with random weights, generating on one GPU.

Written the way a third-party user would: no NVTX, no profiler hooks, only `model.generate`.
MODE=eager uses the dynamic KV cache; MODE=static passes `cache_implementation="static"`, which makes
transformers compile the decode step with torch.compile (mode reduce-overhead: CUDA graphs).

The program's own ground truth is printed as one JSON line (prefix `GROUND_TRUTH `) and written to the file
named by GT_OUT: for every generate call, CUDA events recorded on the current stream
  - when generate is entered (`call_start`),
  - before every forward (transformers calls `prepare_inputs_for_generation` once per forward), and
  - after every token (a stopping criterion that never stops is called once per generated token),
from which the step times, TTFT (first forward start -> first token) and TPOT (mean time between tokens after
the first) are computed in milliseconds.

Environment: MODE (eager|static), CALLS (3), NEW_TOKENS (12), BATCH (4), PROMPT (1024), LAYERS (4), GT_OUT.
"""

import functools
import json
import os
import sys

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM, StoppingCriteria, StoppingCriteriaList

MODE = os.environ.get("MODE", "eager")
CALLS = int(os.environ.get("CALLS", "3"))
NEW_TOKENS = int(os.environ.get("NEW_TOKENS", "12"))
BATCH = int(os.environ.get("BATCH", "4"))
PROMPT = int(os.environ.get("PROMPT", "1024"))
LAYERS = int(os.environ.get("LAYERS", "4"))


def build_model(layers=LAYERS, hidden=2048, intermediate=6144, head_dim=128, max_positions=4096):
    """Qwen3 with random weights (seed 0), bf16 on the GPU: 16 query and 8 key-value heads."""
    config = Qwen3Config(
        vocab_size=32000,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=head_dim,
        max_position_embeddings=max_positions,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to(device="cuda", dtype=torch.bfloat16).eval()
    return model


class TokenMarks(StoppingCriteria):
    """Records a CUDA event after every generated token and never stops generation."""

    def __init__(self):
        self.events = []
        self.never_done = None

    def __call__(self, input_ids, scores, **kwargs):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.events.append(event)
        if self.never_done is None or self.never_done.shape[0] != input_ids.shape[0]:
            self.never_done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        return self.never_done


def mark_forwards(model, starts):
    """Records a CUDA event each time generate prepares the inputs of a forward."""
    original = model.prepare_inputs_for_generation

    # functools.wraps keeps the signature, which transformers inspects to decide which inputs to pass.
    @functools.wraps(original)
    def prepare(*args, **kwargs):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        starts.append(event)
        return original(*args, **kwargs)

    model.prepare_inputs_for_generation = prepare


def one_call(model, input_ids, attention_mask, starts):
    marks = TokenMarks()
    starts.clear()
    call_start = torch.cuda.Event(enable_timing=True)
    call_start.record()
    kwargs = dict(
        attention_mask=attention_mask,
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        do_sample=False,
        pad_token_id=0,
        stopping_criteria=StoppingCriteriaList([marks]),
    )
    if MODE == "static":
        kwargs["cache_implementation"] = "static"
    with torch.inference_mode():
        out = model.generate(input_ids, **kwargs)
    torch.cuda.synchronize()
    ends = marks.events
    forward_starts = list(starts)
    result = {
        "tokens": int(out.shape[1] - input_ids.shape[1]),
        "forwards": len(ends),
        "forward_start_marks": len(forward_starts),
        "call_start_to_first_token_ms": call_start.elapsed_time(ends[0]),
        "token_gap_ms": [ends[i - 1].elapsed_time(ends[i]) for i in range(1, len(ends))],
    }
    if len(forward_starts) == len(ends):
        result["ttft_ms"] = forward_starts[0].elapsed_time(ends[0])
        result["step_busy_ms"] = [s.elapsed_time(e) for s, e in zip(forward_starts, ends)]
        result["step_period_ms"] = [
            forward_starts[i].elapsed_time(forward_starts[i + 1]) for i in range(len(forward_starts) - 1)
        ]
    else:
        result["ttft_ms"] = result["call_start_to_first_token_ms"]
    gaps = result["token_gap_ms"]
    result["tpot_ms"] = sum(gaps) / len(gaps) if gaps else None
    return result


def main():
    if MODE not in ("eager", "static"):
        sys.exit(f"MODE must be eager or static, not {MODE!r}")
    model = build_model()
    starts = []
    mark_forwards(model, starts)
    generator = torch.Generator(device="cuda").manual_seed(1)
    input_ids = torch.randint(1, 32000, (BATCH, PROMPT), device="cuda", generator=generator)
    attention_mask = torch.ones_like(input_ids)
    calls = [one_call(model, input_ids, attention_mask, starts) for _ in range(CALLS)]
    truth = {
        "workload": f"hf_qwen3 {MODE}",
        "config": {"calls": CALLS, "new_tokens": NEW_TOKENS, "batch": BATCH, "prompt": PROMPT, "layers": LAYERS},
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
        "steps": sum(c["forwards"] for c in calls),
        "generate_calls": calls,
    }
    line = json.dumps(truth)
    print("GROUND_TRUTH " + line, flush=True)
    if os.environ.get("GT_OUT"):
        with open(os.environ["GT_OUT"], "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
