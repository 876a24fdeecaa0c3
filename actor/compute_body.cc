#include "actor/body.h"

namespace rill {

ComputeBody::ComputeBody(const OpDef* def, Attrs attrs, OpParams params, std::vector<Shape> logical_inputs,
                         std::span<std::byte> scratch, KernelFn kernel, CudaContext* cuda,
                         std::vector<Shape> input_offsets)
    : def_(def),
      kernel_(kernel ? kernel : def->cpu),
      cuda_(cuda),
      attrs_(std::move(attrs)),
      params_(std::move(params)),
      logical_inputs_(std::move(logical_inputs)),
      input_offsets_(std::move(input_offsets)),
      scratch_(scratch) {}

Status ComputeBody::act(const ActIo& io) {
  if (!shaped_) {  // first act: copy shapes once; later acts only swap pointers
    in_views_.resize(io.inputs.size());
    out_views_.resize(io.outputs.size());
    for (size_t i = 0; i < io.inputs.size(); ++i) in_views_[i] = *io.inputs[i];
    for (size_t o = 0; o < io.outputs.size(); ++o) out_views_[o] = *io.outputs[o];
    shaped_ = true;
  }
  for (size_t i = 0; i < io.inputs.size(); ++i) in_views_[i].data = io.inputs[i]->data;
  for (size_t o = 0; o < io.outputs.size(); ++o) out_views_[o].data = io.outputs[o]->data;
  KernelContext ctx;
  ctx.inputs = in_views_;
  ctx.outputs = out_views_;
  ctx.logical_inputs = logical_inputs_;
  ctx.input_offsets = input_offsets_;
  ctx.attrs = &attrs_;
  ctx.params = params_.get();
  ctx.step = io.step;
  ctx.micro = io.micro;
  ctx.scratch = scratch_;
  if (cuda_) {
    RILL_RETURN_IF_ERROR(cuda_->activate(def_->type));
    ctx.cuda = cuda_;
  }
  return kernel_(ctx);
}

}  // namespace rill
