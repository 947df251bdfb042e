// Numbers and shapes for error messages, as ready-made strings. Streaming an
// integer into c10::str's std::ostringstream crashed (SIGSEGV in
// ostream::_M_insert<long>) with torch 2.11's wheel and GCC 13 on the H200
// machine, while strings stream fine; every operator's checks use these.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <c10/core/SymInt.h>
#include <c10/core/SymNodeImpl.h>
#include <c10/util/ArrayRef.h>

namespace pygpukit {

inline std::string num(int64_t v) { return std::to_string(v); }

// A size that may be symbolic (torch.compile's dynamic shapes): its value,
// or its expression ("s0", "u1 + 2") where it has none.
inline std::string num(const c10::SymInt& v) {
  if (const auto i = v.maybe_as_int()) return num(*i);
  return v.toSymNodeImplUnowned()->str();
}

inline std::string shape(c10::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + num(sizes[i]);
  return s + "]";
}

inline std::string shape(c10::SymIntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + num(sizes[i]);
  return s + "]";
}

// User-given text in an error message (an environment variable, an
// argument string), with bytes that are not printable ASCII written as \xNN:
// the message reaches Python as str, and bytes that are not UTF-8 would turn
// the error into a UnicodeDecodeError, while a NUL would end the message
// early. The first kMaxChars only (then "..."), so a huge value does not make
// a huge message.
inline std::string printable(std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  constexpr size_t kMaxChars = 64;
  std::string s;
  for (size_t n = 0; n < text.size(); ++n) {
    if (n == kMaxChars) return s + "...";
    const auto b = static_cast<unsigned char>(text[n]);
    if (b >= 0x20 && b < 0x7f) s += text[n];
    else s += std::string("\\x") + kHex[b >> 4] + kHex[b & 15];
  }
  return s;
}

}  // namespace pygpukit
