#!/usr/bin/env bash
# Four-GPU capture of the reference workload (default configuration), analysed on the machine, plus a collectives bench.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 OMP_NUM_THREADS=1
C=$PWD/.devcarry/tp4; T0=$SECONDS; cd /tmp
nvidia-smi --query-gpu=index,name --format=csv,noheader; nvidia-smi topo -m | head -6
$C/capture -o /tmp/tp4.sqlite -- python3 -m torch.distributed.run --nproc_per_node=4 $C/tp_llm.py 2>&1 | grep -E "gpu_ms|capture:"
echo "== after capture $((SECONDS-T0)) s"
$C/analyzer report --format json /tmp/tp4.sqlite > $OUT/tp4_report.json
$C/analyzer report /tmp/tp4.sqlite > $OUT/tp4_report.txt
$C/analyzer compare --run $C/tp2_full.sqlite.gz --run /tmp/tp4.sqlite --label TP=2 --label TP=4 > $OUT/compare_tp2_tp4.txt
$C/analyzer compare --format json --run $C/tp2_full.sqlite.gz --run /tmp/tp4.sqlite --label TP=2 --label TP=4 > $OUT/compare_tp2_tp4.json
$C/analyzer collectives /tmp/tp4.sqlite > $OUT/tp4_collectives.txt
echo "== after analysis $((SECONDS-T0)) s"
gzip -1 -c /tmp/tp4.sqlite > $OUT/tp4.sqlite.gz; ls -la $OUT
timeout 70 $C/bench --skip copy,gemm --max-bytes 1G -o $OUT/bench_h200x4.json > $OUT/bench_h200x4.txt 2>&1; echo "bench rc $?"
[ -s $OUT/bench_h200x4.json ] && $C/analyzer collectives --bench $OUT/bench_h200x4.json /tmp/tp4.sqlite > $OUT/tp4_collectives_bench.txt
echo "== end $((SECONDS-T0)) s"
cat $OUT/compare_tp2_tp4.txt | head -60
