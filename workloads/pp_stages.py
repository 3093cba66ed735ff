#!/usr/bin/env python3
"""A pipeline-parallel forward pass over ranks (one stage per rank), stages as heavy as the caller asks.

Used to check the analyzer's pipeline findings on a real program: each rank runs `STAGE_LAYERS[rank]` decoder-style
layers on every micro-batch, receives its input from the previous rank and sends its output to the next with NCCL
point-to-point transfers (GPipe-style forward: every micro-batch flows through all stages, then the next step
starts). With equal layer counts the stages are balanced; with unequal counts the busiest stage sets the pace and
the others wait for it.

    STAGE_LAYERS=2,6 OUT_DIR=/tmp/pp python3 -m torch.distributed.run --nproc_per_node=2 workloads/pp_stages.py

Environment: STAGE_LAYERS (comma-separated, one per rank; default 4,4), MICRO (micro-batches per step, 4), STEPS
(12), WARMUP (2, before the timed steps, each in an NVTX range `warmup`), BATCH (4), SEQ (256), HIDDEN (4096),
FF (11008). Every timed step is an NVTX range `step`. Each rank writes `OUT_DIR/pp_rank<R>.truth.json`: its layer
count, and per timed step its own compute time (CUDA events around each micro-batch's layers, summed) and the
step's wall time, so the stage imbalance the analyzer infers can be checked against what the program measured.
"""

import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


def settings():
    world = int(os.environ.get("WORLD_SIZE", "1"))
    layers = [int(x) for x in os.environ.get("STAGE_LAYERS", "4,4").split(",")]
    if len(layers) != world:
        raise SystemExit(f"STAGE_LAYERS has {len(layers)} entries for {world} ranks")
    env = {k: int(os.environ.get(k, d)) for k, d in
           [("MICRO", 4), ("STEPS", 12), ("WARMUP", 2), ("BATCH", 4), ("SEQ", 256), ("HIDDEN", 4096), ("FF", 11008)]}
    return world, layers, env


def make_layers(count, hidden, ff, device):
    g = torch.Generator(device=device)
    g.manual_seed(1234)

    def weight(*shape):
        return torch.randn(*shape, device=device, dtype=torch.bfloat16, generator=g) * 0.02

    return [dict(qkv=weight(3 * hidden, hidden), o=weight(hidden, hidden), gu=weight(2 * ff, hidden),
                 d=weight(hidden, ff)) for _ in range(count)]


def layer(p, x, heads=32):
    b, s, h = x.shape
    q, k, v = F.linear(F.rms_norm(x, (h,)), p["qkv"]).view(b, s, 3, heads, h // heads).unbind(2)
    a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    x = x + F.linear(a.transpose(1, 2).reshape(b, s, h), p["o"])
    gate, up = F.linear(F.rms_norm(x, (h,)), p["gu"]).chunk(2, -1)
    return x + F.linear(F.silu(gate) * up, p["d"])


def step(rank, world, weights, env, timers):
    """One pipeline step: every micro-batch through this rank's stage, received from and sent to its neighbours."""
    shape = (env["BATCH"], env["SEQ"], env["HIDDEN"])
    for _ in range(env["MICRO"]):
        x = torch.empty(shape, device="cuda", dtype=torch.bfloat16)
        if rank == 0:
            x.normal_()
        else:
            dist.recv(x, rank - 1)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for p in weights:
            x = layer(p, x)
        end.record()
        timers.append((start, end))
        if rank + 1 < world:
            dist.send(x.contiguous(), rank + 1)


def main():
    world, stage_layers, env = settings()
    rank = int(os.environ.get("RANK", "0"))
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl")
    weights = make_layers(stage_layers[rank], env["HIDDEN"], env["FF"], "cuda")
    for _ in range(env["WARMUP"]):
        torch.cuda.nvtx.range_push("warmup")
        step(rank, world, weights, env, [])
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    dist.barrier()
    steps = []
    for _ in range(env["STEPS"]):
        timers = []
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.cuda.nvtx.range_push("step")
        step(rank, world, weights, env, timers)
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - t0) * 1e3
        compute_ms = sum(s.elapsed_time(e) for s, e in timers)
        steps.append({"compute_ms": compute_ms, "wall_ms": wall_ms})
    out_dir = os.environ.get("OUT_DIR", ".")
    os.makedirs(out_dir, exist_ok=True)
    truth = {"rank": rank, "stage": rank, "layers": stage_layers[rank], "settings": env, "steps": steps}
    with open(os.path.join(out_dir, f"pp_rank{rank}.truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    median = sorted(s["compute_ms"] for s in steps)[len(steps) // 2]
    print(f"rank {rank} layers {stage_layers[rank]} compute per step {median:.2f} ms", flush=True)
    dist.destroy_process_group()


main()
