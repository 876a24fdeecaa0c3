// run_op (tests/kernels/grad_check.h) for tests that need it to succeed:
// fails the current test, naming the op and the error, when it does not.
// Test-only code.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/kernels/grad_check.h"

namespace rill::testing {

inline std::vector<Tensor> run_ok(const std::string& type, std::vector<Tensor> inputs, const Attrs& attrs = {},
                                  const RunOptions& options = {}) {
  auto out = run_op(type, std::move(inputs), attrs, options);
  INFO(type, ": ", out.status().to_string());
  REQUIRE(out.ok());
  return std::move(out).value();
}

}  // namespace rill::testing
