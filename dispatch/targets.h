#pragma once

namespace attn::internal {
// Applies ATTN_TARGET once per process (thread-safe); throws attn::Error for
// a bad value. Called at the top of every public entry point.
void InitTargetsOnce();
}  // namespace attn::internal
