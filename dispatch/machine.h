// This process's machine identity, as a tuning file records it
// (dispatch/machine.cc).
#pragma once

#include <string>

namespace attn::internal {

std::string LibraryVersion();  // PROJECT_VERSION
std::string CpuModel();        // /proc/cpuinfo "model name", else "unknown"

}  // namespace attn::internal
