#!/usr/bin/env bash
# A shorter second sitting of comm_only_gpu.sh, for a new build: the clock check first (the default capture plus
# the NCCL plugin's GPU timers, and `--comm-only`, once per configuration), then one interleaved round of
# uncaptured, `--comm-only` and the default capture, cut at ROUND_S seconds. Results as comm_only_gpu.sh's, the
# JSON files and the log in one archive.
#   CARRY=.devcarry/w32 OUT=/tmp/out ROUND_S=110 bash comm_only_gpu_check.sh
set -u
carry=${CARRY:-.devcarry/w32}
out=${OUT:?set OUT}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 OMP_NUM_THREADS=1
keep=/tmp/comm-only-captures
mkdir -p "$keep"
chmod +x "$carry/capture"
bench() { python3 "$carry/capture_overhead.py" --workload "$carry/tp_llm.py" --capture "$carry/capture" \
    --config tp2 --config tp2-launch --rounds-outer --keep-captures "$keep" "$@"; }
pack() {
    for file in "$keep"/*.sqlite; do gzip -c "$file" > "$out/$(basename "$file").gz"; done
    tar -C /tmp -czf "$out/comm-only-check.tgz" comm-only-log.txt $(cd /tmp && ls comm-only-*.json 2>/dev/null)
}
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    bench --mode capture-timers --mode capture-comm-only --rounds 1 --out /tmp/comm-only-check.json
} > /tmp/comm-only-log.txt 2>&1
pack
timeout "${ROUND_S:-110}" python3 "$carry/capture_overhead.py" --workload "$carry/tp_llm.py" \
    --capture "$carry/capture" --config tp2 --config tp2-launch --rounds-outer --rounds 1 \
    --mode uncaptured --mode capture-comm-only --mode capture --out /tmp/comm-only-round.json >> /tmp/comm-only-log.txt 2>&1
pack
