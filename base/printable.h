// Bytes made safe to print on a terminal: text a model wrote (a byte-level
// model writes any byte) must not move the cursor, clear the screen or
// retitle the window. Valid UTF-8, newlines and tabs are kept; other control
// bytes and bytes that are not UTF-8 become \xNN (a backslash doubled).
//
// printable_name: a name a peer chose (a ZeroMQ routing id: up to 255 bytes
// of anything), for one line of a log: newlines and tabs escaped too, so it
// cannot begin a line of its own, and at most `limit` bytes of it shown.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace rill {

namespace printable_internal {

inline std::string escape(std::string_view bytes, bool keep_whitespace) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    // A UTF-8 sequence: its length by the lead byte, then continuation bytes
    // (the shortest form only, no surrogates, at most U+10FFFF).
    size_t n = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    for (size_t k = 1; k < n; ++k) {
      const auto next = i + k < bytes.size() ? static_cast<unsigned char>(bytes[i + k]) : 0;
      const bool second = k == 1;
      const unsigned char lo = second && c == 0xE0 ? 0xA0 : second && c == 0xF0 ? 0x90 : 0x80;
      const unsigned char hi = second && c == 0xED ? 0x9F : second && c == 0xF4 ? 0x8F : 0xBF;
      if (next < lo || next > hi) n = 0;
    }
    if (n > 1) {
      out.append(bytes.substr(i, n));
      i += n;
      continue;
    }
    if (c == '\\') {
      out += "\\\\";
    } else if (n == 1 && (c >= 0x20 || (keep_whitespace && (c == '\n' || c == '\t'))) && c != 0x7F) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
    ++i;
  }
  return out;
}

}  // namespace printable_internal

inline std::string printable(std::string_view bytes) { return printable_internal::escape(bytes, true); }

// "node-1", "\x00k\x8bEg" (ZeroMQ's own ids), "AAAA... (255 bytes)".
inline std::string printable_name(std::string_view bytes, size_t limit = 64) {
  if (bytes.size() <= limit) return printable_internal::escape(bytes, false);
  return fmt::format("{}... ({} bytes)", printable_internal::escape(bytes.substr(0, limit), false), bytes.size());
}

// At most `keep` bytes of a file's content, quoted and printable, for an
// error that must say what it found without quoting the file (a job may
// point a reader at a secret, and the error reaches its submitter): short
// text whole ('abc'), longer text its first bytes and its size ('1.2.3.
// ... (14 bytes)').
inline std::string excerpt(std::string_view bytes, size_t keep = 6) {
  if (bytes.size() <= keep) return fmt::format("'{}'", printable(bytes));
  return fmt::format("'{}...' ({} bytes)", printable(bytes.substr(0, keep)), bytes.size());
}

}  // namespace rill
