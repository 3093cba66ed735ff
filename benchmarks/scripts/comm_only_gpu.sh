#!/usr/bin/env bash
# `capture --comm-only` on two GPUs: what it costs and what it records, in one sitting.
#
# 1. Interleaved rounds of the reference tensor-parallel workload (TP=2 default and launch-bound
#    configurations, configurations alternating inside each round, mode order rotated each round):
#    uncaptured, `capture --comm-only`, `capture` (defaults), Nsight Systems (`-t cuda,nvtx`), until the
#    time budget is spent; the latest capture file of each configuration and capture mode is kept.
# 2. Once per configuration, the default capture plus the NCCL plugin's GPU timers (`--trace
#    all,nccl-timers`): CUPTI's kernels and NCCL's channel times of the same collectives, which checks the
#    GPU clock placement against CUPTI's clock.
# Results go to $OUT: the timing samples (JSON), the log, and the capture files gzipped; compare them with
# benchmarks/scripts/comm_only_compare.py.
#
# Usage (repository root of the GPU machine; CARRY holds capture, libshardscope_inject.so,
# libshardscope_nccl_profiler.so, tp_llm.py and capture_overhead.py):
#   CARRY=.devcarry/w32 BUDGET_S=400 OUT=/tmp/out bash comm_only_gpu.sh
set -u
carry=${CARRY:-.devcarry/w32}
budget_s=${BUDGET_S:-400}
rounds=${ROUNDS:-8}
out=${OUT:?set OUT}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 OMP_NUM_THREADS=1
nsys=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
keep=/tmp/comm-only-captures
mkdir -p "$keep"
chmod +x "$carry/capture"
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
    python3 "$carry/capture_overhead.py" --workload "$carry/tp_llm.py" --capture "$carry/capture" --nsys "$nsys" \
        --config tp2 --config tp2-launch --mode uncaptured --mode capture-comm-only --mode capture --mode nsys \
        --rounds "$rounds" --rounds-outer --budget-s "$budget_s" --keep-captures "$keep" \
        --out "$out/comm-only-overhead.json"
    python3 "$carry/capture_overhead.py" --workload "$carry/tp_llm.py" --capture "$carry/capture" \
        --config tp2 --config tp2-launch --mode capture-timers --rounds 1 --keep-captures "$keep" \
        --out /tmp/comm-only-timers.json
    python3 -c 'import json,sys; d=json.load(open("/tmp/comm-only-timers.json")); [print(s["config"], s["mode"], s["gpu_ms"], *s.get("capture_summary", []), sep="\n  ") for s in d["samples"]]'
} > "$out/log.txt" 2>&1
ls -la "$keep" >> "$out/log.txt"
for file in "$keep"/*.sqlite; do
    gzip -c "$file" > "$out/$(basename "$file").gz"
done
gzip -f "$out/comm-only-overhead.json"
ls -la "$out" >> "$out/log.txt"
