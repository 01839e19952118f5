#pragma once
#include <cstdint>
#include <sstream>
#include <string>

#include "attn/attn.h"

namespace attn::internal {

// A value as the error message prints it.
template <typename T>
std::string Str(T value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

// Throws attn::Error("attn: <field> <why>, got <value>").
[[noreturn]] void Fail(const std::string& field, const std::string& value,
                       const std::string& why);
void RequirePositive(const char* field, int64_t value);

// Throws attn::Error naming the first invalid field of the problem or the
// options. Reads no tensor data and writes nothing.
void Validate(const Problem& problem);
void ValidateOptions(const Options& options);

}  // namespace attn::internal
