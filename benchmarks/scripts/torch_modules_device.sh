#!/usr/bin/env bash
# One sitting on a GPU machine for `capture --torch-modules`: module captures of a random-weight Qwen3 decoder
# (eager decode with allocator counters, decode replayed from a CUDA graph captured eagerly, and static-cache
# generate under torch.compile), torch.profiler's `with_modules=True` trace of the same eager decode, then the
# cost benchmark. Run from the repository root with the stripped `capture` and `libshardscope_inject.so` in
# .devcarry/; results (gzipped traces, the benchmark's JSON, a log) go to $OUT.
#   bash benchmarks/scripts/torch_modules_device.sh captures        # the captures and the torch.profiler trace
#   bash benchmarks/scripts/torch_modules_device.sh bench [BUDGET_S] # the cost benchmark
#   bash benchmarks/scripts/torch_modules_device.sh all [BUDGET_S]   # both
#   bash benchmarks/scripts/torch_modules_device.sh ab [ROUNDS]      # what modules add, inside one process
#       (qwen3_decode.py MODE=hooks-ab under `capture --torch-modules`, plain `capture` and the hook alone;
#       one JSON line per run in $OUT/hooks-ab.jsonl)
#   bash benchmarks/scripts/torch_modules_device.sh split           # eager decode, the eager decode step captured
#       into a CUDA graph and replayed (MODE=graph) and the same step launched kernel by kernel (REPLAY=0),
#       compiled decode replayed from CUDA graphs (MODE=static: transformers' static-cache generate, torch.compile
#       `reduce-overhead`) and the same compiled code launched kernel by kernel (COMPILE_MODE=default), all under
#       `capture --torch-modules`; the decode phases' split of decoder-layer time (modules_compare.py: each
#       graph-replayed program against the same program launched kernel by kernel, and eager decode with its
#       dynamic cache against both) in $OUT/split.txt, the captures in $OUT/split-captures.tar.gz
#   bash benchmarks/scripts/torch_modules_device.sh replay          # only the eager step replayed and launched
#       (MODE=graph, REPLAY=1 and 0) at the model size LAYERS and HIDDEN set, compared; in
#       $OUT/replay-L$LAYERS-H$HIDDEN.txt and .tar.gz
set -u
OUT=${OUT:-/tmp/torch-modules-out}
mkdir -p "$OUT"
STAGE=${1:-captures}
BUDGET=${2:-150}
CAPTURE=$PWD/.devcarry/capture
NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
WORKLOAD=workloads/qwen3_decode.py
LOG=$OUT/log.txt
export PYTHONUNBUFFERED=1 LAYERS=${LAYERS:-4} DECODE=${DECODE:-32}
step() { echo "== $(date +%T) $*" >>"$LOG"; }
# graph_capture REPLAY FILE: the eager decode step captured into a CUDA graph and replayed (MODE=graph, REPLAY=1), or
# the same step launched kernel by kernel (REPLAY=0), under `capture --torch-modules` into FILE.
graph_capture() {
    step "eager decode step, REPLAY=$1 (0: launched kernel by kernel, not replayed) -> $2"
    MODE=graph REPLAY=$1 timeout 120 "$CAPTURE" -o "$2" --force --no-nccl-plugin --torch-modules -- \
        python3 $WORKLOAD >>"$LOG" 2>&1
}
{ nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"; } >>"$LOG" 2>&1

if [ "$STAGE" = captures ] || [ "$STAGE" = all ]; then
step eager capture with memory
MODE=eager "$CAPTURE" -o /tmp/eager.sqlite --force --torch-modules=memory -- python3 $WORKLOAD >>"$LOG" 2>&1
step graph capture
MODE=graph "$CAPTURE" -o /tmp/graph.sqlite --force --torch-modules -- python3 $WORKLOAD >>"$LOG" 2>&1 || {
    step graph capture again with eager attention
    MODE=graph ATTN=eager "$CAPTURE" -o /tmp/graph.sqlite --force --torch-modules -- python3 $WORKLOAD >>"$LOG" 2>&1
    MODE=eager ATTN=eager "$CAPTURE" -o /tmp/eager_attn.sqlite --force --torch-modules -- python3 $WORKLOAD \
        >>"$LOG" 2>&1
}
step eager torch.profiler with_modules
MODE=eager TORCH_PROF=/tmp/eager_kineto.json python3 $WORKLOAD >>"$LOG" 2>&1
step static compiled capture
MODE=static DECODE=16 timeout 100 "$CAPTURE" -o /tmp/static.sqlite --force --torch-modules -- python3 $WORKLOAD \
    >>"$LOG" 2>&1
# What the captures hold: module ranges, graph nodes, graph kernels.
python3 - >>"$LOG" 2>&1 <<'PY'
import sqlite3, os
for name in ("eager", "graph", "static"):
    path = f"/tmp/{name}.sqlite"
    if not os.path.exists(path):
        print(name, "missing"); continue
    db = sqlite3.connect(path)
    q = lambda sql: db.execute(sql).fetchall()
    modules = q("SELECT count(*) FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId WHERE s.value LIKE '%)%'")
    sample = q("SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId LIMIT 12")
    tables = [r[0] for r in q("SELECT name FROM sqlite_master WHERE type='table'")]
    nodes = q("SELECT count(*) FROM SHARDSCOPE_GRAPH_NODES") if "SHARDSCOPE_GRAPH_NODES" in tables else "no table"
    graph_kernels = q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL AND graphNodeId != 0")
    kernels = q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    print(name, "module ranges", modules, "nodes", nodes, "graph kernels", graph_kernels, "kernels", kernels)
    print("  ", [s[0] for s in sample])
PY
for file in /tmp/eager.sqlite /tmp/graph.sqlite /tmp/eager_attn.sqlite /tmp/static.sqlite /tmp/eager_kineto.json; do
    [ -f "$file" ] && gzip -c "$file" >"$OUT/$(basename "$file").gz"
done
ls -la "$OUT" >>"$LOG"
fi

if [ "$STAGE" = bench ] || [ "$STAGE" = all ]; then
step cost benchmark, budget ${BUDGET}s
python3 benchmarks/scripts/torch_modules_cost.py --capture "$CAPTURE" --nsys "$NSYS" --rounds 8 --budget-s "$BUDGET" \
    --out "$OUT/cost.json" >>"$LOG" 2>&1
fi
if [ "$STAGE" = ab ]; then
HOOK_DIR=/tmp/shardscope-hook; mkdir -p "$HOOK_DIR"; cp capture/src/torch_modules/sitecustomize.py "$HOOK_DIR/"
for round in $(seq 1 "${2:-3}"); do
    for run in capture-modules capture hook-alone; do
        step "hooks-ab round $round $run"
        case $run in
            capture-modules) command=("$CAPTURE" --force --no-nccl-plugin --torch-modules -o /tmp/ab.sqlite --);;
            capture) command=("$CAPTURE" --force --no-nccl-plugin -o /tmp/ab.sqlite --);;
            hook-alone) command=(env PYTHONPATH="$HOOK_DIR" SHARDSCOPE_TORCH_MODULES=on);;
        esac
        line=$(MODE=hooks-ab DECODE=320 timeout 80 "${command[@]}" python3 $WORKLOAD 2>>"$LOG" | grep '^{')
        echo "{\"round\": $round, \"run\": \"$run\", \"result\": ${line:-null}}" >>"$OUT/hooks-ab.jsonl"
    done
done
fi
if [ "$STAGE" = split ]; then
step split: eager capture
MODE=eager "$CAPTURE" -o /tmp/split_eager.sqlite --force --no-nccl-plugin --torch-modules -- python3 $WORKLOAD \
    >>"$LOG" 2>&1
step split: static compiled capture
MODE=static timeout 200 "$CAPTURE" -o /tmp/split_static.sqlite --force --no-nccl-plugin --torch-modules -- \
    python3 $WORKLOAD >>"$LOG" 2>&1
graph_capture 1 /tmp/split_graph.sqlite
graph_capture 0 /tmp/split_direct.sqlite
step split: the same compiled code without CUDA graphs
MODE=static COMPILE_MODE=default timeout 200 "$CAPTURE" -o /tmp/split_compiled.sqlite --force --no-nccl-plugin \
    --torch-modules -- python3 $WORKLOAD >>"$LOG" 2>&1
compare() {
    python3 benchmarks/scripts/modules_compare.py --analyzer "$PWD/.devcarry/analyzer" --phase decode "$@"
    echo "compare exit $?" >>"$LOG"
}
{ compare /tmp/split_direct.sqlite /tmp/split_graph.sqlite; compare /tmp/split_eager.sqlite /tmp/split_graph.sqlite
    compare /tmp/split_eager.sqlite /tmp/split_static.sqlite
    compare /tmp/split_compiled.sqlite /tmp/split_static.sqlite; } >"$OUT/split.txt" 2>>"$LOG"
tar -czf "$OUT/split-captures.tar.gz" -C /tmp split_eager.sqlite split_graph.sqlite split_direct.sqlite \
    split_static.sqlite split_compiled.sqlite
fi
if [ "$STAGE" = replay ]; then
size=L$LAYERS-H${HIDDEN:-1024}
graph_capture 1 "/tmp/replay1-$size.sqlite"
graph_capture 0 "/tmp/replay0-$size.sqlite"
python3 benchmarks/scripts/modules_compare.py --analyzer "$PWD/.devcarry/analyzer" --phase decode \
    "/tmp/replay0-$size.sqlite" "/tmp/replay1-$size.sqlite" >"$OUT/replay-$size.txt" 2>>"$LOG"
echo "compare exit $?" >>"$LOG"
tar -czf "$OUT/replay-$size.tar.gz" -C /tmp "replay0-$size.sqlite" "replay1-$size.sqlite"
fi
step done
