// Automatic mixed precision (train.precision "bf16" or "f16"), as PyTorch's
// autocast and OneFlow's enable_amp: every forward matmul whose inputs are
// both f32 multiplies them cast to the 16-bit dtype (tensor cores on a GPU)
// and gives f32, so its gradient matmuls run in 16 bits too (matmul's
// gradient rule casts dC to its inputs' dtype). Variables, optimizer state,
// layer norm, softmax, the loss and every other op stay f32; a cast's
// gradient passes back in f32, so a weight's gradient is f32 and sums as
// before. A tensor read by several matmuls is cast once per placement and
// recompute group; a cast made for a recomputed op is recomputed with it.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/logical_graph.h"
#include "graph/job_modes.h"

namespace rill::compiler {

class Autocast {
 public:
  explicit Autocast(graph::Precision precision);

  // The casts `op` needs (new ops to append before it, in order), with
  // op's inputs renamed to their outputs. None when the precision is not
  // 16-bit, op is no matmul or its inputs are not both f32.
  std::vector<OpNode> casts_for(OpNode* op, const LogicalGraph& g);

 private:
  bool on_ = false;
  DType dtype_ = DType::kF32;
  // (tensor, placement, recompute group) -> the cast's output.
  std::map<std::tuple<std::string, int, std::string>, std::string> made_;
};

}  // namespace rill::compiler
