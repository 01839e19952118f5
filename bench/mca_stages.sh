#!/bin/bash
# llvm-mca's model of the AMX kernel's between-products loops: compiles
# kernels/amx/amx.cc to assembly for the AVX3 target alone with its loop
# bodies marked (kernels/common/mca_markers.h), then runs llvm-mca-14 on
# the marked regions for each CPU model and prints cycles per loop
# iteration and per score element (or per element of O for the finish,
# per 16 x 16 pair tile for the K transpose). The measured side is
# attn-bench's amx-stages rows; docs/performance.md sets the two side by
# side. llvm-mca-14 knows no Zen 4 or Zen 5 (znver4 came with LLVM 16) and
# its znver3 has no AVX-512: icelake-server stands for another AVX-512 core.
#
#   bash bench/mca_stages.sh [CPU ...]     # default: sapphirerapids icelake-server
#
# Needs g++, llvm-mca-14 and Highway's headers (the README's packages).
set -euo pipefail
cd "$(dirname "$0")/.."
cpus=("$@")
[ ${#cpus[@]} -gt 0 ] || cpus=(sapphirerapids icelake-server)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# skylake-avx512: Highway's AVX3 as the one static target (the hardware
# AMX layer compiles only there; -march=sapphirerapids would make it AVX3_DL).
g++ -std=c++17 -O2 -march=skylake-avx512 -DHWY_COMPILE_ONLY_STATIC -DATTN_MCA_MARKERS \
  -I. -Iinclude -S kernels/amx/amx.cc -o "$tmp/amx.s"
for cpu in "${cpus[@]}"; do
  llvm-mca-14 -mcpu="$cpu" -iterations=1000 "$tmp/amx.s" > "$tmp/$cpu.txt" 2>&1 ||
    { echo "mca_stages: llvm-mca-14 -mcpu=$cpu failed:"; tail -5 "$tmp/$cpu.txt"; exit 1; }
done
python3 - "$tmp" "${cpus[@]}" <<'PY'
import re, sys
tmp, cpus = sys.argv[1], sys.argv[2:]
# Elements one iteration of each region covers (AVX3: 16 float lanes).
per_iter = {"max_pass_4_vectors": (64, "score"), "exp_pass_1_vector": (16, "score"),
            "general_scale_1_vector": (16, "score"), "general_bf16_1_vector": (16, "score"),
            "finish_1_vector": (16, "O element"), "k_transpose_16x16": (256, "K pair")}
print("| region | layer | " + " | ".join(f"{c}: cycles/iteration | {c}: cycles/element" for c in cpus) + " | element |")
print("|---|---|" + "---:|---:|" * len(cpus) + "---|")
rows = {}
for cpu in cpus:
    text = open(f"{tmp}/{cpu}.txt").read()
    for m in re.finditer(r"Code Region - (\S+)\s+Iterations:\s+(\d+)\s+Instructions:\s+\d+\s+Total Cycles:\s+(\d+)", text):
        name, iters, cycles = m.group(1), int(m.group(2)), int(m.group(3))
        rows.setdefault(name, {}).setdefault(cpu, cycles / iters)
for name, by_cpu in rows.items():
    base = name[len("amx_"):]
    layer = "hardware" if base.endswith("_hardware") else "emulated" if base.endswith("_emulated") else "-"
    key = re.sub(r"_(hardware|emulated)$", "", base)
    n, unit = per_iter.get(key, (1, "iteration"))
    cells = " | ".join(f"{by_cpu[c]:.2f} | {by_cpu[c] / n:.3f}" for c in cpus)
    print(f"| {key} | {layer} | {cells} | {unit} |")
PY
