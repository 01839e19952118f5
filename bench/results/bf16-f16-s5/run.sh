#!/bin/bash
# usage: run.sh NAME FILTER [extra args...]
set -u
B=/tmp/build-bench/bench/attn-bench
name=$1; filter=$2; shift 2
out=/tmp/s5/$name
{
  echo "# command: ATTN_TUNING_FILE= $B --benchmark_filter='$filter' $*"
  echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p') (AMD EPYC Zen 3, AVX2, 2-core VM), $(nproc) cores; flags: $(grep -o -w -E 'avx2|fma|f16c|avx512f|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "# library: commit c25391b snapshot (git archive) + this bench/attn_bench.cc"
  echo "# start: $(date -u +%FT%TZ) loadavg: $(cat /proc/loadavg)"
} > $out.txt
ATTN_TUNING_FILE= $B --benchmark_filter="$filter" "$@" --benchmark_out=$out.json --benchmark_out_format=json >> $out.txt 2>&1
rc=$?
echo "# end: $(date -u +%FT%TZ) loadavg: $(cat /proc/loadavg) rc=$rc" >> $out.txt
