#!/bin/bash
# Planted-bug checks: show that the test suite catches a bug planted in a
# kernel. Not run by .ci/run (each builds the library once more); see
# docs/reliability.md.
#
#   .ci/planted_bug.sh [tail|memory|dtype|arm|vnni|bf16edge|amxvnni|amxedge|amxrescale|amxprepared|amxoverflow|narrowsum|modifier|split|q8|q4|heads|diag|pipeline|rowwalk|rowgroup|rowonepass|stepped|pairrow|paironepass] [--keep]  (default: tail)
#
# tail    .ci/planted/tail-off-by-one.patch (issue 7): the tail block of
#         ForEachRowBlock (kernels/common/microkernels-inl.h) gets one row
#         too many, so the score and mix micro-kernels read one key / one
#         value column past the end of their tile. Built with clang-14 under
#         ASan + UBSan with the flags of .ci/reliability.sh (-O1, no fuzzer,
#         bench or tools); tests/hostile_test must fail or ASan/UBSan report.
# memory  .ci/planted/per-key-scratch.patch (issue 13): StreamingHead
#         allocates one float per key (256 KiB at 65536 keys). Release build
#         with g++ as the README's; the 65536-key tests of tests/memory_test
#         must fail under their cap (the running target's tiles plus less
#         than one float per key).
# dtype   .ci/planted/widen-tail-dropped.patch (issue 15): the panel
#         kernels' widening of bf16 / f16 key tiles (kernels/common/
#         widen-inl.h) drops the columns past the last whole vector. Release
#         build; tests/dtype_test must fail (the ragged-d shapes).
# arm     .ci/planted/fp16-sign-dropped.patch (issue 8): WidenScalar's
#         native-__fp16 branch (kernels/common/widen-inl.h), which only
#         aarch64 compiles, drops the sign. Release cross build for aarch64
#         as .ci/arm.sh's (cmake/aarch64-linux-gnu.cmake; run .ci/arm.sh once
#         first, it installs the toolchain); tests/dtype_test, run under
#         qemu-aarch64, must fail (every kernel with an f16 input).
# vnni    .ci/planted/vnni-halves-swapped.patch (issue 23): the bf16
#         dot-product kernels' V pair packing (kernels/common/pairs-inl.h)
#         puts each pair's rows in the wrong halves. Release build;
#         tests/bf16dot_test (Bf16DotKernels, emulated on every target) must
#         fail.
# bf16edge .ci/planted/bf16-odd-key-dropped.patch (issue 23): the bf16
#         dot-product kernel mixes keys/2 key pairs of a tile instead of
#         (keys + 1)/2, losing the last key of odd tiles and causal panels.
#         Release build; tests/bf16dot_test must fail.
# amxvnni .ci/planted/amx-key-halves-swapped.patch (issue 23): the AMX
#         kernel's transposed K pair tiles (kernels/amx/pack-inl.h) hold each
#         pair's halves swapped. Release build; tests/bf16dot_test
#         (Bf16DotKernels, the emulated tiles on every target) must fail.
# amxedge .ci/planted/amx-padding-weights-stale.patch (issue 23): the AMX
#         kernel stops zeroing the weights of the padding keys of a group's
#         last 32-key step (kernels/amx/head-body.h AmxRowWeightsTwoPass), so
#         ragged and causal groups mix stale weights. Release build;
#         tests/bf16dot_test must fail.
# amxrescale .ci/planted/amx-rescale-skipped.patch (issue 55): when a key
#         tile raises a row's max, the AMX kernel's two-pass weights rescale
#         the sum but not O. Release build; tests/bf16dot_test's AmxRescale
#         (scores climbing across key tiles) must fail.
# amxprepared .ci/planted/amx-prepared-scaled-twice.patch (issue 55): rows
#         with a mask or score modifiers, their scores already scaled by
#         AmxPrepareRow, take the two-pass weights with the scale once more.
#         Release build; tests/bf16dot_test's AmxWeights must fail.
# amxoverflow .ci/planted/amx-base-overflow-kept.patch (issue 55): the
#         two-pass weights keep rows whose base max·log2(e) overflows (rows
#         masked wholly by -FLT_MAX). Release build; tests/bf16dot_test's
#         AmxWeights must fail.
# narrowsum .ci/planted/narrow-reduction-swapped.patch (issue 24): the
#         decode (narrow) path's AVX-512 reduction of sixteen dot products
#         (SumBlocksOfFour, kernels/common/lane_sums-inl.h) returns keys
#         0-7 and 8-15 in each other's lanes. Release build; tests/
#         kernels_test must fail at the AVX3 target, so only on an AVX-512
#         CPU (elsewhere that code never runs: exit 1). Measured on AMD EPYC
#         Zen 5: decode shapes fail by 0.06 against bounds of ~2e-6.
# modifier .ci/planted/window-off-by-one.patch (issue 25): the panel
#         kernels' sliding-window masking (WindowPanelTile, kernels/common/
#         modifiers-inl.h) admits one key too many at each row's left edge.
#         Release build; tests/modifiers_test (every streaming / parallel
#         variant on every target against the naive kernel's bound) must
#         fail.
# split   .ci/planted/panel-split-off-by-one.patch (issue 25): the
#         streaming panels compute the keys both panel vectors see from one
#         key too late (SplitPanelTile, kernels/streaming/streaming-inl.h),
#         hiding that key from the second vector's rows. Release build;
#         tests/modifiers_test must fail.
# q8      .ci/planted/q8-scale-neighbour.patch (issue 24): the decode
#         (narrow) path's score pass over blocks
#         (kernels/decode/quant_passes-inl.h) applies each K block's scale
#         to the row's next block. Release build; tests/quant_kv_test
#         (BlockKernels, every target) must fail on the decode shapes with
#         d >= 64.
# q4      .ci/planted/q4-nibble-halves-swapped.patch (issue 57): q4_0's
#         vector decode (Q4_0Format::Ints, kernels/common/widen-inl.h)
#         reads elements 0-15 from the high nibbles and 16-31 from the low.
#         Release build; tests/quant_kv_test (BlockKernels, every target)
#         must fail on the q4_0 shapes.
# heads   .ci/planted/heads-v-offset-dropped.patch (issue 26): the span
#         entry points' views (WithSpans, kernels/kernel.cc: the streaming,
#         bf16 dot-product and AMX kernels) give every kv head's view kv
#         head 0's V rows of each page, so token-major pages, whose kv
#         heads run in one call, mix the wrong heads.
#         Release build; tests/paged_test (float64 bound on every variant
#         and target, and the token-major / head-major bits) must fail.
# diag    .ci/planted/diag-shift-dropped.patch (issue 26): the serving
#         executor (dispatch/serving_run.cc) runs each sub-problem (a row
#         block, a key part) with its own diagonal instead of its
#         sequence's (RunConfig::diag_shift 0), misplacing windows and ALiBi
#         distances there. Release build; tests/varlen_test must fail.
# pipeline .ci/planted/pipeline-last-key-dropped.patch (issue 24): the
#         decode path's pipelined walk (NarrowPipelinedKeys, kernels/
#         decode/pipelined-inl.h) leaves each tile's last key out of the
#         mix. Release build; tests/kernels_test (every kernel and target
#         against the float64 bound) must fail on the one-row shapes.
# rowwalk .ci/planted/row-walk-weight-shifted.patch (issue 24): the decode
#         path's row walk (NarrowRowKeys, kernels/decode/row-inl.h) mixes each key's V row with the previous key's
#         weight. Release build; tests/kernels_test (every kernel and target
#         against the float64 bound) must fail on the one-row shapes with
#         d = d_v.
# rowgroup .ci/planted/row-group-weights-swapped.patch (issue 24): the
#         row walk's GQA groups (NarrowRowGroupKeys) mix rows 2 and 3 with
#         the weights of rows 0 and 1. Release build; tests/gqa_test
#         (every kernel and target against the float64 bound) must fail on
#         its decode shape (4-row groups, d = 128).
# rowonepass .ci/planted/row-onepass-weights-swapped.patch (issue 24):
#         the row walk's GQA groups that mix every row in one pass (groups
#         of 4 at d = 64 on AVX-512) mix rows 2 and 3 with the weights of
#         rows 0 and 1. Release build; tests/kernels_test must fail on its
#         GQA decode shape of groups of 4 at d = 64.
# stepped .ci/planted/stepped-group-weight-shifted.patch (issue 26): the
#         pipelined walk's GQA groups, which run in lockstep over the kv
#         heads of token-major K/V (NarrowHeads, kernels/decode/
#         pipelined-inl.h), mix each 4-key step with the weights of the keys
#         one later. Release build; tests/paged_test (token-major pages,
#         groups of 2 rows, against the float64 bound on every variant and
#         target) must fail.
# pairrow .ci/planted/pair-row-weights-swapped.patch (issue 24): the bf16
#         dot path's row walk for all-bf16 GQA decode (PairNarrowRowGroupKeys,
#         kernels/decode/pair_row-body.h) mixes each pair of rows after the
#         first (rows 2-3, and 4-7 of a group of 8) with the weight pairs of
#         the two rows before. Release build; tests/bf16dot_test
#         (Bf16DotKernels, every dot path and target against the float64
#         bound) must fail on its 4- and 8-row decode shapes (d = 128). The walk is
#         compiled for AVX3 only, so only an AVX-512 CPU runs it (elsewhere:
#         exit 1).
# paironepass .ci/planted/pair-onepass-weights-swapped.patch (issue 24):
#         the same walk's groups that mix every row in the first pass (groups
#         of 4 at d = 64) mix rows 2 and 3 with the weight pairs of rows 0
#         and 1. Release build; tests/bf16dot_test must fail on its shape of
#         groups of 4 at d = 64 (AVX-512 CPUs only, as pairrow).
#
# Each: copies the committed tree (git archive HEAD) to a temporary
# directory, applies the patch there (never to the tree), builds the one
# test, runs it as ctest would. Exits 0 only if the planted bug is caught,
# printing the evidence; 1 if it went unnoticed; 2 if the check could not
# run (the patch no longer applies, the build failed). --keep leaves the
# temporary tree.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
case=tail
keep=0
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    tail|memory|dtype|arm|vnni|bf16edge|amxvnni|amxedge|amxrescale|amxprepared|amxoverflow|narrowsum|modifier|split|q8|q4|heads|diag|pipeline|rowwalk|rowgroup|rowonepass|stepped|pairrow|paironepass) case=$arg ;;
    *) echo "usage: .ci/planted_bug.sh [tail|memory|dtype|arm|vnni|bf16edge|amxvnni|amxedge|amxrescale|amxprepared|amxoverflow|narrowsum|modifier|split|q8|q4|heads|diag|pipeline|rowwalk|rowgroup|rowonepass|stepped|pairrow|paironepass] [--keep]" >&2; exit 2 ;;
  esac
done
configure=(-DCMAKE_BUILD_TYPE=Release)  # the README's build, unless the case says otherwise
compilers=()
runner=()  # what runs the test binary (an emulator for a cross build)
how="Release build"
case "$case" in
  tail)
    patch=.ci/planted/tail-off-by-one.patch test=hostile_test filter='*'
    configure=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG"
               -DATTN_SANITIZE=address,undefined)
    compilers=(CC=clang-14 CXX=clang++-14)
    how="ASan+UBSan build" ;;
  dtype) patch=.ci/planted/widen-tail-dropped.patch test=dtype_test filter='Combos/DTypeKernels.*' ;;
  memory) patch=.ci/planted/per-key-scratch.patch test=memory_test filter='Memory.*65536*' ;;
  vnni) patch=.ci/planted/vnni-halves-swapped.patch test=bf16dot_test filter='Shapes/Bf16DotKernels.*' ;;
  bf16edge) patch=.ci/planted/bf16-odd-key-dropped.patch test=bf16dot_test filter='Shapes/Bf16DotKernels.*' ;;
  amxvnni) patch=.ci/planted/amx-key-halves-swapped.patch test=bf16dot_test filter='Shapes/Bf16DotKernels.*' ;;
  amxedge) patch=.ci/planted/amx-padding-weights-stale.patch test=bf16dot_test filter='Shapes/Bf16DotKernels.*' ;;
  amxrescale) patch=.ci/planted/amx-rescale-skipped.patch test=bf16dot_test filter='AmxRescale.*' ;;
  amxprepared) patch=.ci/planted/amx-prepared-scaled-twice.patch test=bf16dot_test filter='AmxWeights.*' ;;
  amxoverflow) patch=.ci/planted/amx-base-overflow-kept.patch test=bf16dot_test filter='AmxWeights.*' ;;
  narrowsum) patch=.ci/planted/narrow-reduction-swapped.patch test=kernels_test filter='Shapes/KernelsTest.*' ;;
  modifier) patch=.ci/planted/window-off-by-one.patch test=modifiers_test filter='Modifiers.EveryKernelAndTargetIsWithinTheNaiveBound' ;;
  split) patch=.ci/planted/panel-split-off-by-one.patch test=modifiers_test filter='Modifiers.EveryKernelAndTargetIsWithinTheNaiveBound' ;;
  q8) patch=.ci/planted/q8-scale-neighbour.patch test=quant_kv_test filter='Combos/BlockKernels.*' ;;
  q4) patch=.ci/planted/q4-nibble-halves-swapped.patch test=quant_kv_test filter='Combos/BlockKernels.*' ;;
  heads) patch=.ci/planted/heads-v-offset-dropped.patch test=paged_test filter='Cases/PagedTest.*:Paged.TokenMajor*' ;;
  diag) patch=.ci/planted/diag-shift-dropped.patch test=varlen_test filter='Cases/VarlenTest.*' ;;
  pipeline) patch=.ci/planted/pipeline-last-key-dropped.patch test=kernels_test filter='Shapes/KernelsTest.*' ;;
  rowwalk) patch=.ci/planted/row-walk-weight-shifted.patch test=kernels_test filter='Shapes/KernelsTest.*' ;;
  rowgroup) patch=.ci/planted/row-group-weights-swapped.patch test=gqa_test filter='Gqa.*' ;;
  stepped) patch=.ci/planted/stepped-group-weight-shifted.patch test=paged_test filter='*' ;;
  pairrow) patch=.ci/planted/pair-row-weights-swapped.patch test=bf16dot_test filter='Shapes/Bf16DotKernels.*' ;;
  rowonepass) patch=.ci/planted/row-onepass-weights-swapped.patch test=kernels_test filter='Shapes/KernelsTest.*' ;;
  paironepass) patch=.ci/planted/pair-onepass-weights-swapped.patch test=bf16dot_test filter='Shapes/Bf16DotKernels.*' ;;
  arm)
    patch=.ci/planted/fp16-sign-dropped.patch test=dtype_test filter='*'
    # Relative: cmake finds it in the copied source tree.
    configure+=(-DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake)
    runner=(env "QEMU_CPU=${QEMU_CPU:-max}" qemu-aarch64 -L /)
    how="aarch64 cross build (run under qemu-aarch64)"
    for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
      command -v "$tool" >/dev/null ||
        { echo "planted_bug: cannot run: no $tool (run .ci/arm.sh once: it installs it)"; exit 2; }
    done ;;
esac
start=$SECONDS
say() { echo "planted_bug: $* (at $((SECONDS - start)) s)"; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/attn-planted.XXXXXX")
trap '[ "$keep" = 1 ] && echo "planted_bug: kept $tmp" || rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src"
git archive HEAD | tar -x -C "$tmp/src" || { say "cannot copy the tree"; exit 2; }
say "tree of $(git rev-parse --short HEAD) copied to $tmp/src"
( cd "$tmp/src" && git apply "$root/$patch" ) ||
  { say "FAILED: $patch no longer applies"; exit 2; }
grep -rn "PLANTED BUG" "$tmp/src/kernels"

say "$how of $test"
env "${compilers[@]}" cmake -S "$tmp/src" -B "$tmp/build" "${configure[@]}" \
  -DATTN_BUILD_BENCH=OFF -DATTN_BUILD_TOOLS=OFF >"$tmp/configure.log" 2>&1 &&
  cmake --build "$tmp/build" -j2 --target "$test" >"$tmp/build.log" 2>&1 ||
  { tail -20 "$tmp/configure.log" "$tmp/build.log"; say "FAILED: the build failed"; exit 2; }

say "running $test --gtest_filter=$filter"
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
OMP_NUM_THREADS=2 ATTN_TUNING_FILE= \
  "${runner[@]}" "$tmp/build/tests/$test" --gtest_filter="$filter" >"$tmp/test.log" 2>&1
rc=$?
say "$test exited with $rc"

# The evidence: the test that was running, the first sanitizer report
# lines (with the first frames of its stack), the first failure message and
# every failed test.
running=$(grep -F '[ RUN      ]' "$tmp/test.log" | tail -1)
report=$(grep -n -m1 -E 'ERROR: AddressSanitizer|runtime error:' "$tmp/test.log" | cut -d: -f1)
failure=$(grep -m2 -A3 -E 'Failure$' "$tmp/test.log" | grep -v '^--$')
failed=$(grep -F '[  FAILED  ]' "$tmp/test.log" | sort -u | head -5)
if [ "$rc" -ne 0 ] && { [ -n "$report" ] || [ -n "$failed" ]; }; then
  echo "planted_bug: CAUGHT"
  echo "  last test started: ${running:-none}"
  if [ -n "$report" ]; then
    sed -n "${report},$((report + 4))p" "$tmp/test.log" | sed 's/^/  /'
    grep -m1 '^SUMMARY:' "$tmp/test.log" | sed 's/^/  /'
  fi
  [ -n "$failure" ] && echo "$failure" | sed 's/^/  /'
  [ -n "$failed" ] && echo "$failed" | sed 's/^/  /'
  say "done"
  exit 0
fi
echo "planted_bug: NOT CAUGHT: $test exited with $rc and reported nothing"
tail -5 "$tmp/test.log"
exit 1
