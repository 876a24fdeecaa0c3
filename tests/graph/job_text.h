// Editing a job file's text for tests that change one thing in it.
#pragma once

#include <doctest/doctest.h>

#include <string>

namespace rill::graph::testing {

// `text` with the first `old` replaced; the test fails if there is none.
inline std::string edit(std::string text, const std::string& old, const std::string& replacement) {
  const size_t at = text.find(old);
  REQUIRE_MESSAGE(at != std::string::npos, "no '" << old << "' in the text");
  return text.replace(at, old.size(), replacement);
}

}  // namespace rill::graph::testing
