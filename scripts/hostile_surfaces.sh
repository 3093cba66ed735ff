#!/usr/bin/env bash
# Hostile inputs for the Parquet datasets, the straggler artifact reader, study files, outputs over inputs,
# secrets in study records, and the slow or blocking inputs: each case runs the release `analyzer` under a 4 GiB
# address-space limit and a 60 s timeout and prints one row: case, exit status, seconds, and the first stderr line.
# An exit of 134 (abort), 101 (panic), 124 (timeout) or 137 is a failure; so is any "CHECK FAILED" row.
#
#   cargo build --release -p shardscope-analyzer && bash scripts/hostile_surfaces.sh [OUT_TSV]
# The last run on the 2-core build machine is in benchmarks/results/hostile-surfaces.tsv (seconds there are single runs,
# not benchmarks).
set -u
root="$(cd "$(dirname "$0")/.." && pwd)"
analyzer="$root/target/release/analyzer"
out_tsv="${1:-/dev/null}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sample="$root/sample-traces/tp2_capture.sqlite.gz"
artifact="$root/analyzer/tests/data/straggler-artifact/trace-ST.parquet"

printf 'case\texit\tseconds\tstderr\n' | tee "$out_tsv"
# run CASE ARGS…: one row for the run of `analyzer ARGS…` under the limits.
run() {
    local name="$1"
    shift
    local started ended status
    started=$(date +%s.%N)
    (ulimit -v 4194304; timeout 60 "$analyzer" "$@" >"$work/stdout" 2>"$work/stderr")
    status=$?
    ended=$(date +%s.%N)
    printf '%s\t%s\t%.2f\t%s\n' "$name" "$status" "$(echo "$ended - $started" | bc)" \
        "$(head -c 300 "$work/stderr" | head -1)" | tee -a "$out_tsv"
}
check() { # check NAME CONDITION-COMMAND…
    local name="$1"
    shift
    if "$@"; then printf '%s\tok\n' "$name" | tee -a "$out_tsv"; else printf '%s\tCHECK FAILED\n' "$name" | tee -a "$out_tsv"; fi
}

# 1. Parquet datasets.
"$analyzer" export --format parquet "$work/ds" "$sample" 2>/dev/null
cp -r "$work/ds" "$work/ds-rank"; rm -r "$work/ds-rank/kernels/run=tp2_capture/rank=1"
run dataset-deleted-rank report "$work/ds-rank"
cp -r "$work/ds" "$work/ds-table"; rm -r "$work/ds-table/nvtx"
run dataset-deleted-table report "$work/ds-table"
cp -r "$work/ds" "$work/ds-dup"
cp "$work/ds-dup/kernels/run=tp2_capture/rank=0/part-0.parquet" "$work/ds-dup/kernels/run=tp2_capture/rank=0/part-0 (1).parquet"
run dataset-duplicated-part report "$work/ds-dup"
for i in 1 2 3 4 5 6 7 8; do
    cp -r "$work/ds" "$work/ds-flip$i"
    python3 - "$work/ds-flip$i/kernels/run=tp2_capture/rank=0/part-0.parquet" "$i" <<'EOF'
import sys, random
path, seed = sys.argv[1], int(sys.argv[2])
data = bytearray(open(path, "rb").read())
random.seed(seed)
at = random.randrange(len(data))
data[at] ^= 1 + random.randrange(255)
open(path, "wb").write(data)
EOF
    run "dataset-flipped-byte-$i" report "$work/ds-flip$i"
done
# Concurrent exports of four runs into one folder, five times: every run must be in the manifest, every file in it.
for trial in 1 2 3 4 5; do
    rm -rf "$work/conc"
    for run_name in a b c d; do
        (ulimit -v 4194304; timeout 60 "$analyzer" export --format parquet --run "$run_name" "$work/conc" "$sample" 2>/dev/null) &
    done
    wait
    check "concurrent-exports-trial-$trial" python3 - "$work/conc" <<'EOF'
import json, os, sys
root = sys.argv[1]
parts = json.load(open(os.path.join(root, "_shardscope_manifest.json")))["parts"]
runs = {p["path"].split("/")[1] for p in parts}
on_disk = {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs if f.endswith(".parquet")}
sys.exit(0 if runs == {"run=a", "run=b", "run=c", "run=d"} and on_disk == {p["path"] for p in parts} else 1)
EOF
done
# An export killed with SIGKILL: the folder is the one before (absent here) or complete, never partial.
for delay in 0.05 0.1 0.2 0.4; do
    rm -rf "$work/killed"
    timeout 60 "$analyzer" export --format parquet "$work/killed" "$sample" 2>/dev/null &
    sleep "$delay"; kill -9 $! 2>/dev/null; wait 2>/dev/null
    if [ -e "$work/killed" ]; then run "export-killed-after-${delay}s" report "$work/killed"; else
        printf 'export-killed-after-%ss\tabsent (the folder before)\n' "$delay" | tee -a "$out_tsv"; fi
done

# 2. Straggler artifact: one flipped byte at a time.
for i in $(seq 1 30); do
    python3 - "$artifact" "$work/art$i.parquet" "$i" <<'EOF'
import sys, random
data = bytearray(open(sys.argv[1], "rb").read())
random.seed(int(sys.argv[3]))
at = random.randrange(len(data))
data[at] ^= 1 + random.randrange(255)
open(sys.argv[2], "wb").write(data)
EOF
    run "artifact-flipped-byte-$i" what-if --straggler-artifact "$work/art$i.parquet"
done

# 3. Study files.
python3 - "$work" <<'EOF'
import sys
work = sys.argv[1]
values = ", ".join(str(v) for v in range(100))
open(f"{work}/grid.toml", "w").write('command = "true"\n[grid]\n' + "".join(f"P{p} = [{values}]\n" for p in range(8)))
open(f"{work}/reps.toml", "w").write('command = "true"\nrepetitions = 4294967295\n[grid]\nX = [1]\n')
open(f"{work}/quote.toml", "w").write(
    'command = "printf %s\'{X}\'"\n[grid]\nX = ["x\' ; touch ' + work + '/pwned ; echo \'"]\n')
open(f"{work}/abs.toml", "w").write('command = "true"\noutput = "/tmp/elsewhere"\n[grid]\nX = [1]\n')
open(f"{work}/up.toml", "w").write('command = "true"\noutput = "../up"\n[grid]\nX = [1]\n')
open(f"{work}/secret.toml", "w").write(
    'command = "sh -c \'echo --api-key=sk-abcdefghijkl HF_TOKEN=hf_abcdefghijkl Bearer abc.def {X}\'"\n'
    '[env]\nHF_TOKEN = "hf_zzzzzzzzzzzz"\n[grid]\nX = [1]\n')
EOF
run study-grid-8x100 study --analyse-only "$work/grid.toml"
run study-repetitions-u32max study --analyse-only "$work/reps.toml"
run study-value-in-quotes study --no-capture "$work/quote.toml"
check study-value-did-not-run test ! -e "$work/pwned"
run study-output-absolute study --analyse-only "$work/abs.toml"
run study-output-dotdot study --analyse-only "$work/up.toml"
mkdir -p "$work/victim" "$work/link-study"; ln -s "$work/victim" "$work/link-study/charts"
printf 'command = "true"\n[grid]\nX = [1]\n' >"$work/link.toml"
run study-charts-symlink study --analyse-only "$work/link.toml"
check study-nothing-through-link test -z "$(ls -A "$work/victim")"
run study-secrets study --no-capture "$work/secret.toml"
check study-records-hold-no-secret sh -c "! grep -rl -e sk-abcdefghijkl -e hf_abcdefghijkl -e hf_zzzz -e abc.def '$work/secret-study' --include='*.json' --include='*.html'"

# 4. Outputs over inputs.
zcat "$sample" >"$work/in.sqlite"
cp "$work/in.sqlite" "$work/in.copy"
run html-over-input report --html "$work/in.sqlite" "$work/in.sqlite"
run perfetto-over-input critical-path --perfetto "$work/in.sqlite" "$work/in.sqlite"
cp "$artifact" "$work/heat.parquet"
run heatmap-over-input what-if --straggler-artifact "$work/heat.parquet" --heatmap "$work/heat.parquet"
ln "$work/in.sqlite" "$work/hard.html"
run html-over-hard-link report --html "$work/hard.html" "$work/in.sqlite"
check inputs-unchanged cmp -s "$work/in.sqlite" "$work/in.copy"
echo precious >"$work/victim.txt"; ln -s "$work/victim.txt" "$work/planted.html"
run html-to-planted-link report --html "$work/planted.html" "$work/in.sqlite"
check planted-link-target-unchanged grep -qx precious "$work/victim.txt"

# 6. Left behind and slow paths.
run dev-zero report /dev/zero
mkfifo "$work/fifo"
SHARDSCOPE_PIPE_WAIT_S=2 run fifo-without-writer report "$work/fifo"
mkdir "$work/strays"; cp "$sample" "$work/strays/rank0.sqlite.gz"
python3 -c "
import os, sys
for i in range(100000): open(os.path.join(sys.argv[1], f'note{i:06}.txt'), 'w').write('x')" "$work/strays"
run folder-of-1e5-strays report "$work/strays"
printf 'folder-of-1e5-strays-stderr-lines\t%s\n' "$(wc -l <"$work/stderr")" | tee -a "$out_tsv"
mkdir -p "$work/tmp"
(TMPDIR="$work/tmp" timeout 60 "$analyzer" report "$sample" >/dev/null 2>&1) &
sleep 0.15; kill -TERM $! 2>/dev/null; wait 2>/dev/null
printf 'sigterm-during-gz-read-files-left\t%s\n' "$(ls -A "$work/tmp" | wc -l)" | tee -a "$out_tsv"
