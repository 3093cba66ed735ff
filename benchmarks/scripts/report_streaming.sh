#!/usr/bin/env bash
# Peak memory and wall time of `analyzer report` holding every rank file at once (`--streaming off`, the path of
# before) and one file at a time (`--streaming on`), on a generated job of one nsys file per rank, interleaved:
# each round runs both modes, their order alternating from round to round. Peak resident memory from
# /usr/bin/time -v, wall time from the clock around it. Both modes print CSV (the findings, which only the
# whole path makes, are not in it), and their outputs must be the same bytes: the script stops if not.
#
#   ANALYZER=target/release/analyzer GEN=target/release/examples/gen_large_nsys \
#     KERNELS=1000000 RANKS=8 ROUNDS=5 OUT=benchmarks/results/report-streaming-2core \
#     bash benchmarks/scripts/report_streaming.sh
#
# Writes $OUT.tsv (one line per run: round, mode, wall_s, peak_rss_kib, output SHA-256) and $OUT.txt (the host,
# the files, and per mode the median, min and max of each figure).
set -eu
A=${ANALYZER:-target/release/analyzer}
G=${GEN:-target/release/examples/gen_large_nsys}
K=${KERNELS:-1000000}
R=${RANKS:-8}
ROUNDS=${ROUNDS:-5}
OUT=${OUT:-benchmarks/results/report-streaming}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$G" --kernels "$K" --ranks "$R" --split -o "$W/job.sqlite" 2> "$W/gen.txt"
{
  echo "host: $(nproc) cores, $(free -g | awk '/^Mem:/ { print $2 " GiB, " $7 " GiB available" }'), shared with other work"
  cat "$W/gen.txt"
  echo "files: $(ls "$W"/job.rank*.sqlite | wc -l), $(du -cb "$W"/job.rank*.sqlite | tail -1 | cut -f1) bytes"
  echo "analyzer: $A ($(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
} > "$OUT.txt"
printf 'round\tmode\twall_s\tpeak_rss_kib\tsha256\n' > "$OUT.tsv"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then modes="off on"; else modes="on off"; fi
  for mode in $modes; do
    t0=$(date +%s.%N)
    /usr/bin/time -v -o "$W/time.txt" "$A" report --format csv --streaming "$mode" "$W"/job.rank*.sqlite \
      > "$W/out.csv" 2> "$W/err.txt"
    t1=$(date +%s.%N)
    rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$W/time.txt")
    sha=$(sha256sum "$W/out.csv" | cut -c1-16)
    printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$mode" "$(awk "BEGIN { print $t1 - $t0 }")" "$rss" "$sha" >> "$OUT.tsv"
  done
done
if [ "$(tail -n +2 "$OUT.tsv" | cut -f5 | sort -u | wc -l)" -ne 1 ]; then
  echo "the two modes printed different reports" >&2
  exit 1
fi
# Per mode: median (min–max) of wall time and peak memory.
python3 - "$OUT.tsv" >> "$OUT.txt" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
for mode in ("off", "on"):
    of = [r for r in rows if r["mode"] == mode]
    wall = [float(r["wall_s"]) for r in of]
    rss = [int(r["peak_rss_kib"]) / 1024 for r in of]
    print(f"--streaming {mode}: {len(of)} runs, wall {statistics.median(wall):.2f} s ({min(wall):.2f}-{max(wall):.2f}), "
          f"peak RSS {statistics.median(rss):.0f} MiB ({min(rss):.0f}-{max(rss):.0f})")
PY
cat "$OUT.txt"
