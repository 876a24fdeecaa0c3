// A checkpoint step as the tests compare them: every tensor's name, shape,
// dtype and values, read whole (runtime/checkpoint/checkpoint.h), whichever
// nodes wrote which pieces. Equal strings: bitwise the same model.
#pragma once

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "runtime/checkpoint/checkpoint.h"

namespace rill::testing {

inline std::string checkpoint_values(const std::filesystem::path& checkpoint_dir, int64_t step) {
  auto c = read_checkpoint((checkpoint_dir / checkpoint_step_name(step)).string());
  if (!c.ok()) return "unreadable: " + c.status().to_string();
  std::string out;
  for (const CheckpointTensor& t : c->tensors) {
    out += t.name + " " + shape_string(t.shape) + " " + std::to_string(static_cast<int>(t.dtype)) + ":";
    out.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
  }
  return out;
}

// Whether step `step` is a complete checkpoint (its meta.json, written last).
inline bool checkpoint_complete(const std::filesystem::path& checkpoint_dir, int64_t step) {
  return std::filesystem::exists(checkpoint_dir / checkpoint_step_name(step) / "meta.json");
}

}  // namespace rill::testing
