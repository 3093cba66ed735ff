#!/usr/bin/env bash
# Reference captures with Nsight Systems and torch.profiler of a small tp_llm configuration.
set -x
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 OMP_NUM_THREADS=1
export LAYERS=2 BATCH=2 SEQ=256 DECODE=8 REPS=1
D=/opt/nvidia/nsight-compute/2025.3.1/host
export LD_LIBRARY_PATH=$PWD/.carry-nsys/lib:$LD_LIBRARY_PATH
W=.devcarry/ref/tp_llm.py
nvidia-smi --query-gpu=name,driver_version --format=csv; nvidia-smi topo -m | head -5
$D/target-linux-x64/nsys --version
cd /tmp
$D/target-linux-x64/nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none -o /tmp/tp2 python3 -m torch.distributed.run --nproc_per_node=2 $OLDPWD/$W 2>&1 | tail -5
$D/linux-desktop-glibc_2_11_3-x64/QdstrmImporter -i /tmp/tp2.qdstrm 2>&1 | tail -2
$D/target-linux-x64/nsys export --type sqlite -o /tmp/tp2.sqlite /tmp/tp2.nsys-rep 2>&1 | tail -2
$D/target-linux-x64/nsys stats --report cuda_gpu_kern_sum --format csv -o /tmp/tp2 /tmp/tp2.nsys-rep 2>&1 | tail -2
$D/target-linux-x64/nsys stats --report cuda_gpu_kern_sum --format csv /tmp/tp2.sqlite > /tmp/tp2_from_sqlite_kern_sum.csv 2>&1
WORLD_SIZE=1 $D/target-linux-x64/nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none -o /tmp/tp1 python3 $OLDPWD/$W 2>&1 | tail -3
$D/linux-desktop-glibc_2_11_3-x64/QdstrmImporter -i /tmp/tp1.qdstrm 2>&1 | tail -2
$D/target-linux-x64/nsys export --type sqlite -o /tmp/tp1.sqlite /tmp/tp1.nsys-rep 2>&1 | tail -2
$D/target-linux-x64/nsys stats --report cuda_gpu_kern_sum --format csv -o /tmp/tp1 /tmp/tp1.nsys-rep 2>&1 | tail -2
mkdir -p /tmp/kineto && TORCH_PROF=/tmp/kineto python3 -m torch.distributed.run --nproc_per_node=2 $OLDPWD/$W 2>&1 | tail -3
ls -la /tmp/*.sqlite /tmp/*.csv /tmp/kineto
for f in /tmp/tp2.sqlite /tmp/tp1.sqlite /tmp/kineto/rank0.pt.trace.json /tmp/kineto/rank1.pt.trace.json; do gzip -c $f > $OUT/$(basename $f).gz; done
cp /tmp/*kern_sum*.csv $OUT/
