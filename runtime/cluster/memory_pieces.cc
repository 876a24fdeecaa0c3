#include "runtime/cluster/memory_pieces.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/printable.h"
#include "compiler/gradient_norm.h"
#include "kernels/op.h"
#include "runtime/node/plan_reader.h"

namespace rill {

namespace ctl = control;

uint64_t most_piece_bytes(const std::map<std::string, Shape>& shapes) {
  constexpr uint64_t kTensorEncoding = uint64_t{64} << 10, kMessages = uint64_t{1} << 20;
  uint64_t most = kMessages;
  for (const auto& [name, shape] : shapes) {
    const int64_t bytes = checked_bytes(shape, DType::kF32);  // < 0: past what any tensor holds
    most += 3 * (static_cast<uint64_t>(std::max<int64_t>(bytes, 0)) + kTensorEncoding);
  }
  return most;
}

std::map<std::string, Shape> model_shapes(const graph::Job& job) {
  std::map<std::string, Shape> shapes;
  for (const graph::Variable& v : job.variables) shapes[v.name] = v.shape;
  if (auto scale = compiler::loss_scale_variable(job.train)) shapes[scale->name] = scale->shape;
  return shapes;
}

StatusOr<std::vector<std::string>> pack_tensors(std::vector<ctl::Tensor> values, std::vector<ctl::Tensor> state,
                                                int64_t job_id, int phase, int64_t step, size_t most,
                                                std::string_view what) {
  most = std::min(kMemoryMessageBytes, most);
  std::vector<std::string> out;
  ctl::PlanPart message;
  size_t held = 0;
  auto flush = [&] {
    if (message.initial_values.empty() && message.initial_state.empty()) return;
    message.job_id = job_id;
    message.phase = phase;
    message.kept_step = step;
    out.push_back(ctl::encode(message));
    message = ctl::PlanPart{};
    held = 0;
  };
  auto add = [&](std::vector<ctl::Tensor>& into, ctl::Tensor& t) -> Status {
    const size_t bytes = t.values.size() * sizeof(float) + t.name.size() + 64 +
                         8 * (t.shape.size() + t.offset.size() + t.piece_shape.size());
    if (bytes > kMemoryMessageBytes)
      return invalid_argument("{} at step {}: '{}' ({} bytes) is larger than one message holds ({} bytes)", what,
                              step, t.name, bytes, kMemoryMessageBytes);
    if (held > 0 && held + bytes > most) flush();
    into.push_back(std::move(t));
    held += bytes;
    return {};
  };
  for (ctl::Tensor& t : values) RILL_RETURN_IF_ERROR(add(message.initial_values, t));
  for (ctl::Tensor& t : state) RILL_RETURN_IF_ERROR(add(message.initial_state, t));
  flush();
  return out;
}

Status WholeTensors::add_message(std::string_view bytes, int64_t job_id, int64_t step) {
  auto decoded = ctl::decode(bytes);
  if (!decoded.ok()) return decoded.status();
  auto* message = std::get_if<ctl::PlanPart>(&*decoded);
  if (message == nullptr || message->job_id != job_id || message->kept_step != step)
    return data_loss("pieces came for another job or step than job {} after step {}", job_id, step);
  for (const ctl::Tensor& t : message->initial_values) RILL_RETURN_IF_ERROR(add(t, false, values));
  for (const ctl::Tensor& t : message->initial_state) RILL_RETURN_IF_ERROR(add(t, true, state));
  return {};
}

Status piece_fits(const ctl::Tensor& t, const Shape* expected) {
  const std::string name = printable_name(t.name);
  if (expected && t.shape != *expected)
    return data_loss("a piece of '{}' says its tensor is {}, not {}", name, shape_string(t.shape),
                     shape_string(*expected));
  if (static_cast<int>(t.shape.size()) > kMaxRank || checked_bytes(t.shape, DType::kF32) < 0)
    return data_loss("a piece of '{}' says its tensor is {}: no tensor has that shape", name,
                     t.shape.size() > static_cast<size_t>(kMaxRank) ? fmt::format("of rank {}", t.shape.size())
                                                                     : shape_string(t.shape));
  const Shape piece = t.piece_shape.empty() ? t.shape : t.piece_shape;
  std::vector<int64_t> offset = t.offset;
  offset.resize(t.shape.size(), 0);
  bool inside = piece.size() == t.shape.size() && t.offset.size() <= t.shape.size();
  // Each axis's piece within the tensor's, so their product cannot overflow.
  for (size_t a = 0; inside && a < piece.size(); ++a)
    inside = piece[a] >= 0 && offset[a] >= 0 && piece[a] <= t.shape[a] && offset[a] <= t.shape[a] - piece[a];
  if (inside) inside = static_cast<int64_t>(t.values.size()) == num_elements(piece);
  if (!inside)
    return data_loss("a piece of '{}' ({} values, {} at [{}]) does not fit its tensor {}", name, t.values.size(),
                     shape_string(piece), fmt::join(offset, ", "), shape_string(t.shape));
  return {};
}

namespace {

// Whether two boxes of one tensor share an element.
bool overlap(const std::vector<int64_t>& a_at, const Shape& a, const std::vector<int64_t>& b_at, const Shape& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] == 0 || b[i] == 0 || a_at[i] + a[i] <= b_at[i] || b_at[i] + b[i] <= a_at[i]) return false;
  return true;
}

// Whether `suffix` names a tensor of optimizer state some update op keeps
// ("adam_m", "adam_v", "momentum").
bool optimizer_state_name(std::string_view suffix) {
  for (const OpDef* def : all_ops())
    for (const char* state : def->state_names)
      if (state != nullptr && suffix == state) return true;
  return false;
}

}  // namespace

Status WholeTensors::add(const ctl::Tensor& t, bool optimizer_state, std::map<std::string, std::vector<float>>& into) {
  const std::string name = printable_name(t.name);  // for errors: what a peer sent
  // A variable's own shape, or (optimizer state "v/m") its variable's.
  const size_t slash = t.name.rfind('/');
  auto known = shapes_.find(optimizer_state && slash != std::string::npos ? t.name.substr(0, slash) : t.name);
  if (known == shapes_.end() ||
      (optimizer_state && (slash == std::string::npos || !optimizer_state_name(std::string_view(t.name).substr(slash + 1)))))
    return data_loss("a piece of '{}' came, which is no {} of this job", name,
                     optimizer_state ? "variable's optimizer state" : "variable");
  RILL_RETURN_IF_ERROR(piece_fits(t, &known->second));
  const Shape piece = t.piece_shape.empty() ? t.shape : t.piece_shape;
  std::vector<int64_t> offset = t.offset;
  offset.resize(t.shape.size(), 0);
  // Pieces of one layout are equal or apart: one that shares an element
  // with a piece placed already is a repeat, or another layout's.
  std::vector<Box>& placed = placed_[t.name];
  if (placed.size() >= kMostPieces)
    return data_loss("more than {} pieces of '{}' came", kMostPieces, name);
  for (const Box& b : placed)
    if (overlap(offset, piece, b.offset, b.shape))
      return data_loss("the piece of '{}' at [{}] overlaps the one at [{}]", name, fmt::join(offset, ", "),
                       fmt::join(b.offset, ", "));
  placed.push_back(Box{offset, piece});
  std::vector<float>& whole = into[t.name];
  Shape shape;
  place_piece(t.shape, offset, piece, std::span<float>(const_cast<float*>(t.values.data()), t.values.size()), &shape,
              &whole);
  covered_[t.name] += num_elements(piece);
  return {};
}

Status WholeTensors::check_whole(const std::vector<std::string>& variables) const {
  for (const std::string& v : variables)
    if (values.count(v) == 0) return data_loss("no piece of variable '{}' came", v);
  // The pieces placed share no element, so as many elements as the tensor
  // has are all of it.
  for (const auto* tensors : {&values, &state})
    for (const auto& [name, whole] : *tensors) {
      auto it = covered_.find(name);
      const int64_t covered = it == covered_.end() ? 0 : it->second;
      if (covered != static_cast<int64_t>(whole.size()))
        return data_loss("the pieces of '{}' cover {} of its {} elements", name, covered, whole.size());
    }
  return {};
}

}  // namespace rill
