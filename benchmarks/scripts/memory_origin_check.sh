#!/usr/bin/env bash
# GPU check of the memory peak's split by origin, on one GPU: workloads/memory_probe.py (it prints PyTorch's own
# max_memory_reserved() as JSON) captured with `capture --trace all,memory`, the same program under Nsight Systems
# (--cuda-memory-usage=true) when nsys is on PATH, and the analyzer's peak and peak_by_origin of each against it
# (memory_check.py with --analyzer; no launch-cost rounds, no torch.profiler run). Inputs: the stripped release
# `capture` with its .so files beside it and `analyzer`, in CARRY; outputs in OUT: memory-origin-check.json, the
# gzipped capture and nsys export, memory-origin-check.log.
#   CARRY=.devcarry/memory OUT=$OUT bash benchmarks/scripts/memory_origin_check.sh
set -u
carry=${CARRY:-.devcarry/memory}
out=${OUT:?set OUT}
chmod +x "$carry/capture" "$carry/analyzer"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    command -v nsys && nsys --version
    python3 benchmarks/scripts/memory_check.py --capture "$carry/capture" --analyzer "$carry/analyzer" \
        --workloads workloads --rounds 0 --no-kineto --out "$out/memory-origin-check.json"
} > "$out/memory-origin-check.log" 2>&1
tail -c 6000 "$out/memory-origin-check.log"
