"""A jitted JAX program whose step applies the same block 8 times, on one GPU.

Written the way a third-party user would: no annotations, only `jax.jit`. Each step is one XLA executable
(XLA runs it as a command buffer, i.e. a CUDA graph); inside it the block (RMS norm, up projection, GELU, down
projection, residual) repeats BLOCKS times with the same weights, so the kernel sequence repeats 8 times per step.

The program's own ground truth is printed as one JSON line (prefix `GROUND_TRUTH `) and written to GT_OUT: the
number of steps (the first one compiles), and each step's host time in milliseconds from its call to the end of
`block_until_ready` (`step_ms`) and from its call to the next step's call (`step_period_ms`).

Environment: STEPS (40), BLOCKS (8), TOKENS (4096), HIDDEN (2048), FFN (8192), GT_OUT.
"""

import json
import os
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

STEPS = int(os.environ.get("STEPS", "40"))
BLOCKS = int(os.environ.get("BLOCKS", "8"))
TOKENS = int(os.environ.get("TOKENS", "4096"))
HIDDEN = int(os.environ.get("HIDDEN", "2048"))
FFN = int(os.environ.get("FFN", "8192"))


def block(x, w_up, w_down, gain):
    x32 = x.astype(jnp.float32)
    normed = (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)).astype(x.dtype) * gain
    return x + jax.nn.gelu(normed @ w_up) @ w_down


@jax.jit
def step(params, x):
    for _ in range(BLOCKS):
        x = block(x, *params)
    return x


def main():
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    params = (
        (jax.random.normal(keys[0], (HIDDEN, FFN), jnp.float32) * 0.02).astype(jnp.bfloat16),
        (jax.random.normal(keys[1], (FFN, HIDDEN), jnp.float32) * 0.02).astype(jnp.bfloat16),
        jnp.ones((HIDDEN,), jnp.bfloat16),
    )
    x = jax.random.normal(keys[2], (TOKENS, HIDDEN), jnp.float32).astype(jnp.bfloat16)
    x.block_until_ready()
    calls = []
    ends = []
    for _ in range(STEPS):
        calls.append(time.perf_counter())
        x = step(params, x)
        x.block_until_ready()
        ends.append(time.perf_counter())
    truth = {
        "workload": "jax_blocks",
        "config": {"steps": STEPS, "blocks": BLOCKS, "tokens": TOKENS, "hidden": HIDDEN, "ffn": FFN},
        "versions": {"jax": jax.__version__, "device": str(jax.devices()[0])},
        "steps": STEPS,
        "step_ms": [(e - c) * 1e3 for c, e in zip(calls, ends)],
        "step_period_ms": [(calls[i + 1] - calls[i]) * 1e3 for i in range(STEPS - 1)],
        "output_finite": bool(jnp.isfinite(x).all()),
    }
    line = json.dumps(truth)
    print("GROUND_TRUTH " + line, flush=True)
    if os.environ.get("GT_OUT"):
        with open(os.environ["GT_OUT"], "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
