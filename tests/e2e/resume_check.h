// A job run straight and resumed from its checkpoint, the resumed steps
// compared with the straight run's, bit for bit (tests/e2e/
// checkpoint_test.cc, compression_test.cc).
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "checkpoint_values.h"
#include "process_util.h"
#include "run_results.h"

namespace rill::testing {

// Runs `job` (a job file and its flags) for 60 steps with a checkpoint every
// 20 (keeping 2), then again from step 40, and checks the resumed steps
// against the straight run's. The same kernels, the same ring order and the
// same fixed-order sums on the same machine: the resumed steps are bitwise
// the straight run's (the result file prints doubles with 17 significant
// digits). Returns the resumed run's output and the checkpoint folder.
struct Resumed {
  std::string output;
  std::filesystem::path dir;
};
inline Resumed check_resume_bitwise(const std::string& job, const std::string& name) {
  auto dir = temp_dir("rill-resume-") / name;
  std::filesystem::remove_all(dir);
  auto straight = temp_dir("rill-resume-") / (name + "_straight.json");
  auto resumed = temp_dir("rill-resume-") / (name + "_resumed.json");
  Ran a = run_rill("run " + job + " --steps 60 --set checkpoint.dir=" + dir.string() +
                   " --set checkpoint.every=20 --set checkpoint.keep=2 --result " + straight.string());
  INFO(a.output);
  REQUIRE(a.code == 0);
  CHECK(rill::testing::checkpoint_complete(dir, 60));
  CHECK(std::filesystem::exists(dir / "step-00000040"));
  CHECK_FALSE(std::filesystem::exists(dir / "step-00000020"));  // keep = 2
  Ran b = run_rill("run " + job + " --steps 60 --resume " + (dir / "step-00000040").string() + " --result " +
                   resumed.string());
  INFO(b.output);
  REQUIRE(b.code == 0);
  auto x = read_json(straight)["loss_curve"];
  auto y = read_json(resumed)["loss_curve"];
  REQUIRE(y.size() == 20);
  for (size_t i = 0; i < 20; ++i) {
    CAPTURE(i);
    CHECK(x[40 + i].get<double>() == y[i].get<double>());
  }
  return {b.output, dir};
}

}  // namespace rill::testing
