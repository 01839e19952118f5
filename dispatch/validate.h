#pragma once
#include "attn/attn.h"

namespace attn::internal {

// Throws attn::Error naming the first invalid field of the problem or the
// options. Reads no tensor data and writes nothing.
void Validate(const Problem& problem);
void ValidateOptions(const Options& options);

}  // namespace attn::internal
