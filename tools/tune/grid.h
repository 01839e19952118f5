// The shapes attn-tune tunes, and the conversion of results to table entries.
#pragma once

#include <string>
#include <vector>

#include "dispatch/tuning.h"
#include "tools/tune/shape_tuner.h"

namespace attn_tune {

// The default grid, at each thread count: decode (T_q = 1, T_k from 256 to
// 16k) and prefill (T_q = T_k from 16 to 16k, causal and not), T spaced by 4
// so that the library's buckets (factor 4 in T) cover every T up to 64k;
// d in {32, 64, 80, 96, 128, 256}. Sorted cheapest first.
std::vector<TuneShape> DefaultGrid(const std::vector<int>& threads);
// The quick grid (under a minute on 2 cores): decode 1x2048 and prefill
// 128, 512 and 2048 (causal too at 2048), d in {64, 128}.
std::vector<TuneShape> QuickGrid(const std::vector<int>& threads);
// "Tq:Tk:d:causal,..." (causal 0/1, optional: "Tq:Tk:d" is non-causal), at
// each thread count. Throws std::invalid_argument naming the bad item.
std::vector<TuneShape> ParseShapes(const std::string& list, const std::vector<int>& threads);

// The table entry for a tuned shape (its winner, config and figures).
attn::internal::TuningEntry ToEntry(const ShapeResult& result, double peak_gflops);

}  // namespace attn_tune
