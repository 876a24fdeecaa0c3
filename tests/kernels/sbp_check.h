// SBP signature checks for op tests: an op's signatures are claims that
// running its kernel on the pieces of its inputs gives the pieces of its
// outputs. `check_sbp_signatures` tests every claim against the kernel by
// simulating several devices in one thread.
//
// Test-only code; single-threaded.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/attrs.h"
#include "kernels/op.h"
#include "tests/kernels/grad_check.h"

// Checks a Status at the caller's line, printing it when it is an error.
#define EXPECT_OK(expr)                                \
  do {                                                 \
    const ::rill::Status status_ = (expr);             \
    CHECK_MESSAGE(status_.ok(), status_.to_string());  \
  } while (0)

namespace rill::testing {

// Piece `index` of `parallel` of a tensor split along `axis` (balanced, as
// piece_region() cuts it).
Tensor split_piece(const Tensor& whole, int axis, int parallel, int index);
// Joins pieces along `axis`.
Tensor concat_pieces(const std::vector<Tensor>& pieces, int axis);
// "(S(0), B) -> (P)".
std::string signature_string(const SbpSignature& signature);

// For every signature the op offers for `inputs`: cuts each input into
// `parallel` pieces by its SBP (S: balanced slices, B: copies, P: random
// addends that sum to it), runs the kernel on each device's pieces with the
// logical input shapes, joins the outputs by their SBPs (S: concat, B: every
// piece must be equal, P: sum) and compares with the single-device result:
// |got - want| <= tolerance * max(1, |want|). The default 1e-4 holds on any
// CPU: the test tensors are small (sums of at most a few dozen terms of
// magnitude about 1), so any summation order or GEMM kernel is within
// gamma_n * sum|terms| < 1e-5 of the exact value, and a wrong signature is off
// by a whole term. Also checks each signature's
// arity and that split axes exist. Returns OK or the first failure, naming
// the op and the signature.
Status check_sbp_signatures(const std::string& type, const std::vector<Tensor>& inputs, const Attrs& attrs = {},
                            int parallel = 2, double tolerance = 1e-4);

}  // namespace rill::testing
