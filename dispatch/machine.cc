// This process's machine identity (see dispatch/machine.h).
#include "dispatch/machine.h"

#include <fstream>

#ifndef ATTN_VERSION
#define ATTN_VERSION "unknown"
#endif

namespace attn::internal {

std::string LibraryVersion() { return ATTN_VERSION; }

std::string CpuModel() {
  static const std::string model = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("model name", 0) != 0) continue;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      const size_t begin = line.find_first_not_of(" \t", colon + 1);
      const size_t end = line.find_last_not_of(" \t\r");
      if (begin != std::string::npos && end >= begin) return line.substr(begin, end - begin + 1);
    }
    return std::string("unknown");
  }();
  return model;
}

}  // namespace attn::internal
