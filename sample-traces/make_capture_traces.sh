#!/usr/bin/env bash
# Captures of the small tp_llm configuration with shardscope's own `capture`, and what NVIDIA's
# `nsys stats` makes of them. Run from the repository root on the GPU machine, with release builds of
# `capture` and `libshardscope_inject.so` (stripped) and the workload copied to `.devcarry/cap/`, and
# libdw/libelf (which the machine's Nsight Systems importer lacks) in `.carry-nsys/lib`.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 OMP_NUM_THREADS=1
export LAYERS=2 BATCH=2 SEQ=256 DECODE=8 REPS=1
R=$PWD/.devcarry/cap; NL=$PWD/.carry-nsys/lib; T=/tmp/cap; mkdir -p $T; cd $T
NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
$R/capture -o $T/tp2_capture.sqlite -- python3 -m torch.distributed.run --nproc_per_node=2 $R/tp_llm.py
WORLD_SIZE=1 $R/capture -o $T/tp1_capture.sqlite -- python3 $R/tp_llm.py
for f in tp1_capture tp2_capture; do
  LD_LIBRARY_PATH=$NL $NSYS stats --report cuda_gpu_kern_sum --format csv $T/$f.sqlite > $T/$f.cuda_gpu_kern_sum.csv
  gzip -c $T/$f.sqlite > $OUT/$f.sqlite.gz
done
cp $T/*.cuda_gpu_kern_sum.csv $OUT/
