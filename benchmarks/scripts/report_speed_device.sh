#!/bin/bash
# The report-speed sitting on a GPU host's CPUs, pinned to 16 cores: unpacks two analyzer builds and the trace
# generator (stripped, xz-compressed, beside this script as analyzer-before.xz, analyzer-after.xz, gen_large_nsys.xz,
# with report_speed.py), generates the 1 M- and 10 M-kernel 8-rank traces, and times both builds' `report` and
# `kern-sum`, and `nsys stats` where Nsight Systems is installed, interleaved (benchmarks/scripts/report_speed.py).
# Results go to $OUT; DEADLINE_S bounds the timed part (seconds).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
W=/tmp/w28; mkdir -p $W
for f in analyzer-before analyzer-after gen_large_nsys; do
  python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $HERE/$f.xz $W/$f && chmod +x $W/$f
done
{ nproc; lscpu | grep -E 'Model name|^CPU\(s\)|NUMA node'; free -g; df -h /tmp | tail -1; } > $OUT/host.txt 2>&1
NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
[ -x $NSYS ] && NSYSARG="--nsys $NSYS --nsys-rounds 1" || NSYSARG=""
echo "nsys: ${NSYSARG:-absent}" >> $OUT/host.txt
T0=$(date +%s%N)
taskset -c 0-15 $W/gen_large_nsys --kernels 1000000 --ranks 8 -o $W/k1m.sqlite >> $OUT/host.txt 2>&1
T1=$(date +%s%N)
taskset -c 0-15 $W/gen_large_nsys --kernels 10000000 --ranks 8 -o $W/k10m.sqlite >> $OUT/host.txt 2>&1
T2=$(date +%s%N)
echo "generate 1M: $(( (T1 - T0) / 1000000 )) ms, 10M: $(( (T2 - T1) / 1000000 )) ms" >> $OUT/host.txt
ls -la $W >> $OUT/host.txt
taskset -c 0-15 python3 $HERE/report_speed.py --rounds 3 --build before=$W/analyzer-before --build after=$W/analyzer-after \
  --trace k1m=$W/k1m.sqlite --trace k10m=$W/k10m.sqlite $NSYSARG --deadline-s ${DEADLINE_S:-120} \
  --out $OUT/report-speed-h100x2.json > $OUT/report-speed-h100x2.txt 2>&1
gzip -9 $OUT/report-speed-h100x2.json
tail -20 $OUT/report-speed-h100x2.txt
