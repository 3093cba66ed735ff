#!/usr/bin/env bash
# `capture --comm-only` on two GPUs: what it costs and what it records, in one sitting (which may be split
# over several commands: FIRST_ROUND goes on with the mode order of the next round).
#
# 1. Interleaved rounds of the reference tensor-parallel workload (TP=2 default and launch-bound
#    configurations, configurations alternating inside each round, mode order rotated each round): the MODES
#    (default: uncaptured, `capture --comm-only`, `capture` (defaults), Nsight Systems `-t cuda,nvtx`), until
#    ROUNDS rounds are done or the time budget is spent; the latest capture file of each configuration and
#    capture mode is kept.
# 2. With TIMERS=1, once per configuration, the default capture plus the NCCL plugin's GPU timers (`--trace
#    all,nccl-timers`): CUPTI's kernels and NCCL's channel times of the same collectives, which checks the GPU
#    clock placement and the kernel sample's widening against CUPTI's clock.
# Results go to $OUT: the timing samples (JSON, gzipped), the log, comm_only_compare.py's figures of the kept
# captures (compare-TAG.json), and the captures in two tars (--comm-only ones, the others); join a split sitting
# with capture_overhead.py --combine.
#
# Usage (repository root of the GPU machine; CARRY holds capture, libshardscope_inject.so,
# libshardscope_nccl_profiler.so, tp_llm.py and capture_overhead.py):
#   CARRY=.devcarry/w32 ROUNDS=4 FIRST_ROUND=0 BUDGET_S=400 TAG=part1 OUT=/tmp/out bash comm_only_gpu.sh
set -u
carry=${CARRY:-.devcarry/w32}
budget_s=${BUDGET_S:-400}
rounds=${ROUNDS:-8}
first_round=${FIRST_ROUND:-0}
tag=${TAG:-sitting}
modes=${MODES:-uncaptured capture-comm-only capture nsys}
out=${OUT:?set OUT}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 OMP_NUM_THREADS=1
nsys=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
keep=/tmp/comm-only-captures-$tag
mkdir -p "$keep"
chmod +x "$carry/capture"
mode_args=()
for mode in $modes; do mode_args+=(--mode "$mode"); done
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
    if [ "$rounds" -gt 0 ]; then
        python3 "$carry/capture_overhead.py" --workload "$carry/tp_llm.py" --capture "$carry/capture" --nsys "$nsys" \
            --config tp2 --config tp2-launch "${mode_args[@]}" --rounds "$rounds" --first-round "$first_round" \
            --rounds-outer --budget-s "$budget_s" --keep-captures "$keep" --out "$out/comm-only-overhead-$tag.json"
    fi
    if [ "${TIMERS:-0}" = 1 ]; then
        python3 "$carry/capture_overhead.py" --workload "$carry/tp_llm.py" --capture "$carry/capture" \
            --config tp2 --config tp2-launch --mode capture-timers --rounds 1 --keep-captures "$keep" \
            --out /tmp/comm-only-timers.json
        python3 -c 'import json,sys; d=json.load(open("/tmp/comm-only-timers.json")); [print(s["config"], s["mode"], s["gpu_ms"], *s.get("capture_summary", []), sep="\n  ") for s in d["samples"]]'
    fi
} > "$out/log-$tag.txt" 2>&1
ls -la "$keep" >> "$out/log-$tag.txt"
gzip -f "$out/comm-only-overhead-$tag.json" 2>/dev/null
# Compared here, so that the figures come back even when the captures are too large to (a 10-repetition default
# capture is 20-40 MB); the --comm-only captures, the small ones, in one tar, the others in a second.
python3 "$(dirname "$0")/comm_only_compare.py" --dir "$keep" --out "$out/compare-$tag.json" >> "$out/log-$tag.txt" 2>&1
(cd "$keep" && tar czf "$out/captures-$tag.tar.gz" ./*comm-only*.sqlite) 2>> "$out/log-$tag.txt"
others=$(cd "$keep" && ls | grep -v comm-only)
[ -n "$others" ] && (cd "$keep" && tar czf "$out/captures-others-$tag.tar.gz" $others) 2>> "$out/log-$tag.txt"
ls -la "$out" >> "$out/log-$tag.txt"
