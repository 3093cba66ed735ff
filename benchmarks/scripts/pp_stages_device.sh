#!/usr/bin/env bash
# Records the pipeline-parallel workload (workloads/pp_stages.py) on two GPUs: stages imbalanced (2 and 6 layers)
# and balanced (4 and 4) with `capture`, and the imbalanced one with Nsight Systems as well, each with the program's
# own per-stage compute times (`pp_rank<R>.truth.json`). The captures are the real pipeline traces of
# sample-traces/pipeline/; the analyzer's findings on them are written beside them.
#
# Usage (repository root of a two-GPU machine; CARRY holds capture, its two libraries, analyzer and pp_stages.py;
# NSYS_CARRY holds the libraries Nsight Systems' importer lacks, see docs/device notes):
#   CARRY=.devcarry NSYS_CARRY=.carry-nsys OUT=/tmp/out bash benchmarks/scripts/pp_stages_device.sh
set -u
carry=${CARRY:-.devcarry}
out=${OUT:?set OUT}
nsys_dir=${NSYS_DIR:-/opt/nvidia/nsight-compute/2025.3.1/host}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 OMP_NUM_THREADS=1
chmod +x "$carry/capture" "$carry/analyzer"
work=/tmp/pp-stages
mkdir -p "$work"
run() { python3 -m torch.distributed.run --nproc_per_node=2 "$carry/pp_stages.py"; }
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
    for pair in "2,6:imbalanced" "4,4:balanced"; do
        name=${pair#*:}
        STAGE_LAYERS=${pair%%:*} OUT_DIR=$work/$name "$carry/capture" --force -o "$work/pp_$name.sqlite" -- \
            python3 -m torch.distributed.run --nproc_per_node=2 "$carry/pp_stages.py"
        echo "capture $name exit $?"
        "$carry/analyzer" findings "$work/pp_$name.sqlite" > "$work/$name/findings.txt" 2>&1
        "$carry/analyzer" findings --format json "$work/pp_$name.sqlite" > "$work/$name/findings.json" 2>&1
        cat "$work/$name/findings.txt"
    done
    export LD_LIBRARY_PATH=$PWD/${NSYS_CARRY:-.carry-nsys}/lib:${LD_LIBRARY_PATH:-}
    STAGE_LAYERS=2,6 OUT_DIR=$work/nsys "$nsys_dir/target-linux-x64/nsys" profile -t cuda,nvtx --sample=none \
        --cpuctxsw=none --force-overwrite=true -o "$work/pp_nsys" \
        python3 -m torch.distributed.run --nproc_per_node=2 "$carry/pp_stages.py"
    [ -f "$work/pp_nsys.qdstrm" ] && "$nsys_dir/linux-desktop-glibc_2_11_3-x64/QdstrmImporter" -i "$work/pp_nsys.qdstrm"
    "$nsys_dir/target-linux-x64/nsys" export --type sqlite --force-overwrite=true -o "$work/pp_nsys_imbalanced.sqlite" \
        "$work/pp_nsys.nsys-rep"
    "$carry/analyzer" findings "$work/pp_nsys_imbalanced.sqlite" 2>&1 | tee "$work/nsys/findings.txt"
} > "$out/log.txt" 2>&1
for file in "$work"/pp_imbalanced.sqlite "$work"/pp_balanced.sqlite "$work"/pp_nsys_imbalanced.sqlite; do
    [ -f "$file" ] && gzip -c "$file" > "$out/$(basename "$file").gz"
done
tar -czf "$out/pp-truth.tar.gz" -C "$work" imbalanced balanced nsys
ls -la "$out" >> "$out/log.txt"
