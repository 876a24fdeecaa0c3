#include "actor/body.h"

namespace rill {

ComputeBody::ComputeBody(const OpDef* def, Attrs attrs, OpParams params, std::vector<Shape> logical_inputs,
                         std::span<std::byte> scratch, KernelFn kernel, CudaContext* cuda,
                         std::vector<Shape> input_offsets, bool graphs)
    : def_(def),
      kernel_(kernel ? kernel : def->cpu),
      cuda_(cuda),
      graphs_(graphs && cuda != nullptr && !def->reads_step),
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
    if (graphs_) return launch(ctx);
  }
  return kernel_(ctx);
}

// What a kernel reads besides its views' data, shapes, attributes and the
// step is fixed for the task, so the slots and the micro-batch index say
// which work an act enqueues.
Status ComputeBody::launch(KernelContext& ctx) {
  buffers_.clear();
  for (const TensorView& v : in_views_) buffers_.push_back(v.data);
  for (const TensorView& v : out_views_) buffers_.push_back(v.data);
  for (const Graph& g : captured_)
    if (g.micro == ctx.micro && g.buffers == buffers_) return cuda_->replay(g.exec.get(), def_->type);
  // The first act launches directly, so whatever a library sets up on first
  // use (cuBLAS) is done outside any capture.
  if (!launched_) {
    launched_ = true;
    return kernel_(ctx);
  }
  if (captured_.size() == kMaxGraphs) return kernel_(ctx);
  auto made = cuda_->capture([&] { return kernel_(ctx); }, def_->type);
  if (!made.ok()) {
    if (made.status().code() != Code::kFailedPrecondition) return made.status();
    graphs_ = false;  // its work cannot be captured: launched directly from now on
    return kernel_(ctx);
  }
  captured_.push_back({buffers_, ctx.micro, std::unique_ptr<void, GraphFree>(*made, GraphFree{cuda_})});
  return cuda_->replay(captured_.back().exec.get(), def_->type);
}

}  // namespace rill
