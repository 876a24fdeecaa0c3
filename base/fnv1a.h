// FNV-1a, 64 bits: a hash of bytes that is the same on every machine, build
// and run (names to pserver picks and seeds, schema texts to their hash).
// Not for anything an adversary chooses. Pure; any thread.
#pragma once

#include <cstdint>
#include <string_view>

namespace rill {

inline constexpr uint64_t kFnv1aBasis = 14695981039346656037ull;

// Chains: fnv1a(b, fnv1a(a)) hashes a then b.
constexpr uint64_t fnv1a(std::string_view text, uint64_t h = kFnv1aBasis) {
  for (char c : text) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

}  // namespace rill
