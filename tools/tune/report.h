// attn-tune's picture: a self-contained HTML page of inline SVG charts,
// GFLOP/s against T for every kernel, one chart per d (and per kind of shape
// and thread count), with the measured FMA peak as a dashed line.
#pragma once

#include <string>

#include "dispatch/tuning.h"

namespace attn_tune {

// Built from the table alone, so a report can be redrawn from any file.
std::string RenderReport(const attn::internal::TuningTable& table);

}  // namespace attn_tune
