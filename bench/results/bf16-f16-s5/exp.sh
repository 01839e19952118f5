#!/bin/bash
# usage: exp.sh OUTNAME ROUNDS FILTER VAR=VALUE... : alternates one attn-bench process per setting, ROUNDS times
set -u
B=/tmp/build-bench/bench/attn-bench
name=$1; rounds=$2; filter=$3; shift 3
out=/tmp/s5/$name; mkdir -p $out
echo "# filter: $filter; settings: $*; start $(date -u +%T) load $(cat /proc/loadavg)" > $out/log.txt
for r in $(seq 1 $rounds); do
  for s in "$@"; do
    tag=$(echo "$s" | tr '=,' '__')
    env ATTN_TUNING_FILE= $s $B --benchmark_filter="$filter" --benchmark_min_time=0.2 --benchmark_repetitions=3 \
      --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
      --benchmark_format=json > $out/$tag-r$r.json 2> $out/$tag-r$r.err
    echo "$s r$r $(date -u +%T) load $(cat /proc/loadavg) $(grep -o 'bandwidth, 1 thread: [0-9.]* GB/s' $out/$tag-r$r.err)" >> $out/log.txt
  done
done
