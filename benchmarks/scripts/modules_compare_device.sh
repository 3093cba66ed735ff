#!/usr/bin/env bash
# One sitting on a GPU machine (one GPU): the module view of `capture --torch-modules` against torch.profiler's
# (`with_modules=True, with_stack=True`) on the same program, `workloads/modules_vs_torch_profiler.py` (random-weight
# Qwen3 decoder, eager decode). Run from the repository root with the stripped `capture`,
# `libshardscope_inject.so` and `analyzer` in .devcarry/; results go to $OUT: both traces gzipped, the comparison
# (`compare.txt`, `compare.json`, from benchmarks/scripts/modules_compare.py) and a log.
#   bash benchmarks/scripts/modules_compare_device.sh
# The capture records the second pass only (--cuda-profiler-api, the workload's torch.cuda.profiler.start/stop),
# as torch.profiler does; if that capture has no module rows, the whole program is captured instead (the phase
# `decode` then holds the warm-up steps too).
set -u
OUT=${OUT:-/tmp/modules-compare-out}
mkdir -p "$OUT"
CARRY=$PWD/.devcarry
WORKLOAD=workloads/modules_vs_torch_profiler.py
LOG=$OUT/log.txt
export PYTHONUNBUFFERED=1 LAYERS=${LAYERS:-4} DECODE=${DECODE:-32}
step() { echo "== $(date +%T) $*" >>"$LOG"; }
{ nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"; } >>"$LOG" 2>&1

step capture --torch-modules --cuda-profiler-api
"$CARRY/capture" -o /tmp/modules.sqlite --force --torch-modules --cuda-profiler-api -- python3 $WORKLOAD >>"$LOG" 2>&1
# `analyzer modules` exits 0 with a "no module ranges" line when it finds none: look for that line too.
if ! "$CARRY/analyzer" modules --format json /tmp/modules.sqlite >/tmp/modules.json 2>/tmp/modules.err \
    || grep -q "no module ranges" /tmp/modules.err; then
    cat /tmp/modules.err >>"$LOG"
    step the windowed capture has no module rows: capture the whole program
    "$CARRY/capture" -o /tmp/modules.sqlite --force --torch-modules -- python3 $WORKLOAD >>"$LOG" 2>&1
fi
step torch.profiler with_modules with_stack
python3 $WORKLOAD --torch-profiler /tmp/kineto.json >>"$LOG" 2>&1
step compare
python3 benchmarks/scripts/modules_compare.py --analyzer "$CARRY/analyzer" --out "$OUT/compare.json" \
    /tmp/modules.sqlite /tmp/kineto.json >"$OUT/compare.txt" 2>>"$LOG"
echo "compare exit $?" >>"$LOG"
"$CARRY/analyzer" modules /tmp/kineto.json >"$OUT/kineto_modules.txt" 2>>"$LOG"
"$CARRY/analyzer" modules /tmp/modules.sqlite >"$OUT/capture_modules.txt" 2>>"$LOG"
for file in /tmp/modules.sqlite /tmp/kineto.json; do
    [ -f "$file" ] && gzip -c "$file" >"$OUT/$(basename "$file").gz"
done
ls -la "$OUT" >>"$LOG"
cat "$OUT/compare.txt"
step done
