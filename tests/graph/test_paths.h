// Paths of files in the source tree for graph tests: RILL_SOURCE_ROOT is set
// by meson test (tests/meson.build); without it, the working directory is used.
#pragma once

#include <cstdlib>
#include <string>

namespace rill::graph::testing {

inline std::string source_path(const std::string& relative) {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  return (root != nullptr && *root != '\0' ? std::string(root) : std::string(".")) + "/" + relative;
}

}  // namespace rill::graph::testing
