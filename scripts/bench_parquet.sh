#!/usr/bin/env bash
# Parquet export and read-back times on a generated trace, against the SQLite path, in interleaved rounds.
#
#   scripts/bench_parquet.sh [KERNELS] [RANKS] [ROUNDS]     (defaults: 2000000 8 5)
#
# Each round runs, in turn: the report from the SQLite file (read + analysis), the export to a fresh dataset (read
# SQLite + analysis + write Parquet) and the report from the dataset (read Parquet + analysis). Prints every
# sample (wall seconds and peak RSS), then the median and min–max of each command.
set -euo pipefail
kernels=${1:-2000000}
ranks=${2:-8}
rounds=${3:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet -p shardscope-analyzer --bin analyzer
cargo build --release --quiet -p shardscope-io --example gen_large_nsys
analyzer="$root/target/release/analyzer"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$root/target/release/examples/gen_large_nsys" --kernels "$kernels" --ranks "$ranks" -o "$work/big.sqlite" >/dev/null
sample() { # name, command…
    local name=$1
    shift
    /usr/bin/time -f "$name %e %M" -a -o "$work/times" "$@" >/dev/null 2>"$work/stderr" || { cat "$work/stderr"; exit 1; }
}
for round in $(seq "$rounds"); do
    sample report_sqlite "$analyzer" report --format json "$work/big.sqlite"
    rm -rf "$work/ds"
    sample export_parquet "$analyzer" export --format parquet "$work/ds" "$work/big.sqlite"
    sample report_parquet "$analyzer" report --format json "$work/ds"
done
cmp <("$analyzer" report --format json "$work/big.sqlite") <("$analyzer" report --format json "$work/ds")
echo "reports identical; dataset $(du -sh "$work/ds" | cut -f1), SQLite $(du -sh "$work/big.sqlite" | cut -f1)"
cat "$work/times"
python3 - "$work/times" <<'PY'
import statistics, sys
samples = {}
for line in open(sys.argv[1]):
    name, seconds, rss_kb = line.split()
    samples.setdefault(name, []).append((float(seconds), int(rss_kb)))
for name, values in samples.items():
    seconds = [s for s, _ in values]
    rss_mb = [r / 1024 for _, r in values]
    print(f"{name}: median {statistics.median(seconds):.2f} s (min {min(seconds):.2f}, max {max(seconds):.2f}), "
          f"peak RSS median {statistics.median(rss_mb):.0f} MB, n={len(seconds)}")
PY
