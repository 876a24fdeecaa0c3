// A boxing each device makes from its own piece alone (plan.fbs
// BoxingConf.own, train.nccl), on one axis of the hierarchy: B -> S(a) its
// slice, B -> P the value on the axis's first rank and zeros on the others,
// S(a) -> P its piece with zeros around. No other rank takes part: on a GPU
// the copies are cudaMemcpy2DAsync and the zeros cudaMemsetAsync on the
// device's stream, in its memory (no trip through the host, no comm
// thread); on cpu devices the host's memcpy and memset. The same bits as a
// host boxing's (copies only).
#pragma once

#include <string>

#include "actor/body.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace rill {

class OwnPieceBody {
 public:
  // Its input covers `input` of the logical tensor, its output `output`;
  // `zero`: the output is zeroed first; `copy`: then their overlap copied
  // in. `cuda`: its GPU's context (null: host memory).
  OwnPieceBody(CudaContext* cuda, Region input, Region output, bool zero, bool copy, DType dtype, std::string name);
  Status act(const ActIo& io);

 private:
  CudaContext* cuda_;
  Region input_, output_, box_;
  bool zero_, copy_;
  DType dtype_;
  std::string name_;
};

}  // namespace rill
