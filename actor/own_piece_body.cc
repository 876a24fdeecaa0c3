#include "actor/own_piece_body.h"

#include <cstring>
#include <utility>

namespace rill {

OwnPieceBody::OwnPieceBody(CudaContext* cuda, Region input, Region output, bool zero, bool copy, DType dtype,
                           std::string name)
    : cuda_(cuda),
      input_(std::move(input)),
      output_(std::move(output)),
      box_(intersect(input_, output_)),
      zero_(zero),
      copy_(copy),
      dtype_(dtype),
      name_(std::move(name)) {}

Status OwnPieceBody::act(const ActIo& io) {
  // Inputs: the piece, then control regsts; outputs: the piece, then at most one control regst.
  if (io.inputs.empty() || io.outputs.empty())
    return internal_error("boxing '{}': {} inputs, {} outputs", name_, io.inputs.size(), io.outputs.size());
  const TensorView& in = *io.inputs[0];
  const TensorView& out = *io.outputs[0];
  const size_t element = dtype_size(dtype_);
  if (in.bytes() != static_cast<size_t>(input_.size()) * element ||
      out.bytes() != static_cast<size_t>(output_.size()) * element)
    return internal_error("boxing '{}': slots of {} and {} bytes for pieces {} and {} of {}", name_, in.bytes(),
                          out.bytes(), shape_string(input_.extent), shape_string(output_.extent), dtype_name(dtype_));
  if (zero_) {
    if (cuda_ != nullptr) RILL_RETURN_IF_ERROR(cuda_->zero(out.data, out.bytes(), name_.c_str()));
    else std::memset(out.data, 0, out.bytes());
  }
  if (!copy_) return {};
  if (cuda_ == nullptr) {
    copy_region(in.data, input_, out.data, output_, box_, element);
    return {};
  }
  Status status;
  const auto* src = static_cast<const std::byte*>(in.data);
  auto* dst = static_cast<std::byte*>(out.data);
  for_each_box_plane(input_, output_, box_, element,
                     [&](size_t from, size_t to, size_t width, size_t rows, size_t src_pitch, size_t dst_pitch) {
                       if (status.ok())
                         status = cuda_->copy_rows(dst + to, dst_pitch, src + from, src_pitch, width, rows,
                                                   CopyKind::kDeviceToDevice, name_.c_str());
                     });
  return status;
}

}  // namespace rill
