#!/usr/bin/env bash
# Memory recording's cost on the launch-bound PyTorch loop: uncaptured, capture --trace all, --trace all,memory,
# modes rotated each round, the workload pinned to one core. One line per run: round mode launch_ns wall_s.
set -u
C=${CAPTURE:-.devcarry/capture}
W=${WORKLOAD:-workloads/torch_launch_cost.py}
END=$(( $(date +%s) + ${BUDGET_S:-330} ))
modes=(none all all,memory)
echo "gpu $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)" > $OUT/mem_cost.tsv
for r in $(seq 0 $(( ${ROUNDS:-12} - 1 ))); do
  [ $(date +%s) -gt $END ] && break
  for i in 0 1 2; do
    m=${modes[$(( (i + r) % 3 ))]}
    t0=$(date +%s.%N)
    if [ $m = none ]; then
      line=$(CUDA_VISIBLE_DEVICES=0 taskset -c 4 python3 $W 200 100 2>/dev/null | grep launch_ns)
    else
      line=$(CUDA_VISIBLE_DEVICES=0 taskset -c 4 $C --force --no-nccl-plugin --trace $m -o /tmp/m.sqlite -- python3 $W 200 100 2>/dev/null | grep launch_ns)
    fi
    t1=$(date +%s.%N)
    echo "$r $m $(echo $line | awk '{print $3}') $(awk "BEGIN { print $t1 - $t0 }")" >> $OUT/mem_cost.tsv
  done
done
