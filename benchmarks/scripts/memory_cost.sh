#!/usr/bin/env bash
# Memory recording's cost on the launch-bound PyTorch loop (workloads/torch_launch_cost.py), the workload pinned
# to one core, modes rotated each round.
#   bash memory_cost.sh          between processes: uncaptured, capture --trace all, --trace all,memory;
#                                one line per run in $OUT/mem_cost.tsv: round mode launch_ns wall_s
#   bash memory_cost.sh windows  inside each process: `capture --cuda-profiler-api` with --trace all and with
#                                --trace all,memory, the workload's --windows pairs (recording on ÷ off in one
#                                process), and the workload uncaptured (a check of the method: both halves the
#                                same); one JSON line per run in $OUT/mem_cost_windows.jsonl. Memory's cost is
#                                the ratio of the two captured modes' ratios.
set -u
C=${CAPTURE:-.devcarry/capture}
W=${WORKLOAD:-workloads/torch_launch_cost.py}
END=$(( $(date +%s) + ${BUDGET_S:-330} ))
if [ "${1:-}" = windows ]; then
  modes=(none all all,memory)
  for r in $(seq 0 $(( ${ROUNDS:-6} - 1 ))); do
    [ $(date +%s) -gt $END ] && break
    for i in 0 1 2; do
      m=${modes[$(( (i + r) % 3 ))]}
      run=($C --force --no-nccl-plugin --cuda-profiler-api --trace $m -o /tmp/m.sqlite --)
      [ $m = none ] && run=()
      line=$(CUDA_VISIBLE_DEVICES=0 taskset -c 4 "${run[@]}" python3 $W 20 100 --windows ${PAIRS:-40} 2>/dev/null \
        | grep '^{')
      echo "{\"round\": $r, \"trace\": \"$m\", \"result\": ${line:-null}}" >> $OUT/mem_cost_windows.jsonl
    done
  done
  exit 0
fi
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
