// Reading what `rill run --result` wrote, for the end-to-end tests.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "process_util.h"

namespace rill::testing {

// A checkpoint's step folder: "step-00000040".
inline std::string step_folder(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Runs `rill run ARGS --steps 10` into `result` and returns the loss curve
// (fails the test unless the run succeeds with 10 losses).
inline nlohmann::json ten_step_curve(const std::string& args, const std::filesystem::path& result) {
  Ran ran = run_rill("run " + args + " --steps 10 --result " + result.string());
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  auto curve = read_json(result)["loss_curve"];
  REQUIRE(curve.size() == 10);
  return curve;
}

}  // namespace rill::testing
