// `rill` and OpenBLAS's kernels: where OpenBLAS falls back to its generic
// ones on a CPU it does not know, the command runs itself again with the
// CPU's own (kernels/ops/cpu_kernels_info.h).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "process_util.h"

namespace {

using rill::testing::Ran;
using rill::testing::root;

}  // namespace

// OpenBLAS picks its kernels by CPU model as it loads, and falls back to its
// generic Prescott kernels on a model newer than the library; with
// OPENBLAS_CORETYPE unset, `rill` then runs itself again with the best core
// this CPU executes (kernels/ops/cpu_kernels_info.h). What OpenBLAS picks on
// its own is asked of the library in another process.
TEST_CASE("rill runs the kernels of this CPU where OpenBLAS fell back to its generic ones, unless one is named") {
  const Ran own = rill::testing::run_shell(
      "env -u OPENBLAS_CORETYPE python3 -c 'import ctypes; b = ctypes.CDLL(\"libopenblas.so.0\"); "
      "b.openblas_get_corename.restype = ctypes.c_char_p; print(b.openblas_get_corename().decode())'");
  INFO(own.output);
  REQUIRE(own.code == 0);
  const std::string own_core = own.output.substr(0, own.output.find('\n'));
  std::string expected = own_core, expected_avx2 = own_core;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (own_core == "Prescott" && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    expected = expected_avx2 = "Haswell";
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
      expected = "SkylakeX";
  }
#endif
  const auto result_file = rill::testing::temp_dir("rill-blas-cli-") / "blas-core-result.json";
  const std::string run = " run " + root() + "/samples/linear_regression/linear_regression.json --steps 5 --result " +
                          result_file.string();
  const Ran unset = rill::testing::run_shell("env -u OPENBLAS_CORETYPE " + rill::testing::binary() + run);
  INFO(unset.output);
  REQUIRE(unset.code == 0);
  std::ifstream unset_in(result_file);
  CHECK(nlohmann::json::parse(unset_in)["cpu_kernels"]["blas"] == expected);
  // No better than the loops' copy: RILL_CPU_ISA=avx2 caps both.
  const Ran capped = rill::testing::run_shell("env -u OPENBLAS_CORETYPE RILL_CPU_ISA=avx2 " + rill::testing::binary() + run);
  REQUIRE(capped.code == 0);
  std::ifstream capped_in(result_file);
  CHECK(nlohmann::json::parse(capped_in)["cpu_kernels"]["blas"] == expected_avx2);
  // A core the user names is kept, the generic one too.
  const Ran named = rill::testing::run_shell("OPENBLAS_CORETYPE=Prescott " + rill::testing::binary() + run);
  REQUIRE(named.code == 0);
  std::ifstream named_in(result_file);
  const std::string named_core = nlohmann::json::parse(named_in)["cpu_kernels"]["blas"];
  CHECK((named_core == "Prescott" || named_core == own_core));  // a single-target OpenBLAS names its own
}
