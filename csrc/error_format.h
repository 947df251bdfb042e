// Numbers and shapes for error messages, as ready-made strings. Streaming an
// integer into c10::str's std::ostringstream crashed (SIGSEGV in
// ostream::_M_insert<long>) with torch 2.11's wheel and GCC 13 on the H200
// machine, while strings stream fine; every operator's checks use these.
#pragma once

#include <cstdint>
#include <string>

#include <c10/util/ArrayRef.h>

namespace pygpukit {

inline std::string num(int64_t v) { return std::to_string(v); }

inline std::string shape(c10::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + num(sizes[i]);
  return s + "]";
}

}  // namespace pygpukit
