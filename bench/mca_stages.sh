#!/bin/bash
# llvm-mca's model of the AMX kernel's between-products loops: compiles
# kernels/amx/amx.cc to assembly for one Highway target at a time with its
# loop bodies marked (kernels/common/mca_markers.h), runs llvm-mca-14 on the
# marked regions for CPU models of that target, and prints cycles per loop
# iteration and per element (score, element of O for the finish, K pair for
# the 16 x 16 transpose). The measured side is attn-bench's amx-stages
# rows; docs/performance.md sets the two side by side.
#
#   bash bench/mca_stages.sh
#
# AVX3 (AVX-512) is modelled on sapphirerapids and icelake-server, AVX2 on
# znver3 and skylake. llvm-mca-14 knows no Zen 4 or Zen 5 (znver4 came with
# LLVM 16), and its znver3 has no AVX-512. Needs g++, llvm-mca-14 and
# Highway's headers (the README's packages).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The flags pick Highway's one static target: -march=skylake-avx512 gives
# AVX3 (the hardware AMX layer compiles only there; sapphirerapids would
# give AVX3_DL); AVX2 needs AES and CLMUL besides (-march=haswell alone
# gives SSSE3).
model() {  # TARGET "FLAGS" LANES CPU...
  local target=$1 flags=$2 lanes=$3
  shift 3
  # shellcheck disable=SC2086  # flags: several words
  g++ -std=c++17 -O2 $flags -DHWY_COMPILE_ONLY_STATIC -DATTN_MCA_MARKERS \
    -I. -Iinclude -S kernels/amx/amx.cc -o "$tmp/$target.s"
  for cpu in "$@"; do
    llvm-mca-14 -mcpu="$cpu" -iterations=1000 "$tmp/$target.s" > "$tmp/$target-$cpu.txt" 2>&1 ||
      { echo "mca_stages: llvm-mca-14 -mcpu=$cpu failed:"; tail -5 "$tmp/$target-$cpu.txt"; exit 1; }
  done
  if grep -q "N_SSSE3\|N_SSE4" "$tmp/$target.s"; then
    echo "mca_stages: $flags did not compile $target alone"; exit 1
  fi
  python3 - "$tmp" "$target" "$lanes" "$@" <<'PY'
import re, sys
tmp, target, lanes, cpus = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
per_iter = {"max_pass_4_vectors": (4 * lanes, "score"), "exp_pass_2_vectors": (2 * lanes, "score"),
            "general_scale_1_vector": (lanes, "score"), "general_bf16_1_vector": (lanes, "score"),
            "finish_1_vector": (lanes, "O element"), "k_transpose_16x16": (256, "K pair")}
print(f"\n{target} ({lanes} float lanes). sim: cycles an iteration in llvm-mca's run of 1000;"
      f" bound: its Block RThroughput (the busiest resource); per element: sim over the"
      f" elements an iteration covers\n")
print("| region | layer | " + " | ".join(f"{c}: sim | bound | per element" for c in cpus) + " | element |")
print("|---|---|" + "---:|---:|---:|" * len(cpus) + "---|")
rows = {}
for cpu in cpus:
    text = open(f"{tmp}/{target}-{cpu}.txt").read()
    pat = (r"Code Region - (\S+)\s+Iterations:\s+(\d+)\s+Instructions:\s+\d+\s+"
           r"Total Cycles:\s+(\d+).*?Block RThroughput:\s+([\d.]+)")
    for m in re.finditer(pat, text, re.S):
        name, iters, cycles, bound = m.group(1), int(m.group(2)), int(m.group(3)), float(m.group(4))
        rows.setdefault(name, {}).setdefault(cpu, (cycles / iters, bound))
for name, by_cpu in rows.items():
    base = name[len("amx_"):]
    m = re.match(r"(.*?)_(hardware|emulated|excluded)$", base)
    key, layer = (m.group(1), m.group(2)) if m else (base, "-")
    if layer == "excluded":  # the emulated layer's vector code again
        continue
    n, unit = per_iter.get(key, (1, "iteration"))
    cells = " | ".join(f"{by_cpu[c][0]:.2f} | {by_cpu[c][1]:.2f} | {by_cpu[c][0] / n:.3f}" for c in cpus)
    print(f"| {key} | {layer} | {cells} | {unit} |")
PY
}
echo "bash bench/mca_stages.sh at $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(llvm-mca-14 --version | grep -o 'LLVM version [0-9.]*')"
model AVX3 "-march=skylake-avx512" 16 sapphirerapids icelake-server
model AVX2 "-march=haswell -maes -mpclmul" 8 znver3 skylake
