#!/usr/bin/env bash
# Runs each engine workload once under `capture` and once uncaptured (its ground truth without a recorder),
# on one GPU. Run from the repository root on the GPU machine with stripped release builds of `capture`,
# `libshardscope_inject.so` and `libshardscope_nccl_profiler.so` in `.devcarry/`. Writes the gzipped
# captures and `truth.tar.gz` (ground-truth JSON and logs) to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TOKENIZERS_PARALLELISM=false
# ENGINES_DIR: where the workloads are; CAPTURE_BIN: the capture binary (the injection library beside it).
W=${ENGINES_DIR:-$PWD/workloads/engines}; C=${CAPTURE_BIN:-$PWD/.devcarry/capture}; T=/tmp/engines; mkdir -p $T
nvidia-smi -L > $T/device.txt 2>&1
run_one() {  # name, then the command: captured first, then uncaptured; results packed after each
  local name=$1; shift
  GT_OUT=$T/${name}.truth.json timeout 150 $C -o $T/${name}.sqlite -- "$@" > $T/${name}_captured.log 2>&1
  echo "$name captured rc=$? $(date +%T)"
  [ -f $T/${name}.sqlite ] && gzip -9 -c $T/${name}.sqlite > $OUT/${name}.sqlite.gz
  tail -n 4 $T/${name}_captured.log | cut -c1-300
  GT_OUT=$T/${name}_uncaptured.truth.json timeout 120 "$@" > $T/${name}_uncaptured.log 2>&1
  echo "$name uncaptured rc=$? $(date +%T)"
  (cd $T && tar czf $OUT/truth.tar.gz *.json *.log device.txt)
}
MODE=eager run_one hf_qwen3_eager python3 $W/hf_qwen3.py
MODE=static run_one hf_qwen3_static python3 $W/hf_qwen3.py
run_one jax_blocks python3 $W/jax_blocks.py
ls -la $OUT
