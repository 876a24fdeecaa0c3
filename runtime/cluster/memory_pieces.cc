#include "runtime/cluster/memory_pieces.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/node/plan_reader.h"

namespace rill {

namespace ctl = control;

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
  for (const ctl::Tensor& t : message->initial_values) RILL_RETURN_IF_ERROR(add(t, values));
  for (const ctl::Tensor& t : message->initial_state) RILL_RETURN_IF_ERROR(add(t, state));
  return {};
}

Status WholeTensors::add(const ctl::Tensor& t, std::map<std::string, std::vector<float>>& into) {
  const Shape piece = t.piece_shape.empty() ? t.shape : t.piece_shape;
  std::vector<int64_t> offset = t.offset;
  offset.resize(t.shape.size(), 0);
  bool inside = piece.size() == t.shape.size() && t.offset.size() <= t.shape.size() &&
                static_cast<int64_t>(t.values.size()) == num_elements(piece);
  for (size_t a = 0; inside && a < piece.size(); ++a)
    inside = offset[a] >= 0 && piece[a] >= 0 && offset[a] + piece[a] <= t.shape[a];
  if (!inside)
    return data_loss("a piece of '{}' ({} values, {} at [{}]) does not fit its tensor {}", t.name, t.values.size(),
                     shape_string(piece), fmt::join(offset, ", "), shape_string(t.shape));
  std::vector<float>& whole = into[t.name];
  if (!whole.empty() && static_cast<int64_t>(whole.size()) != num_elements(t.shape))
    return data_loss("pieces of '{}' disagree on its shape ({} elements, then {})", t.name, whole.size(),
                     shape_string(t.shape));
  // Pieces of one layout are equal or apart: one placed again is a repeat.
  std::vector<std::vector<int64_t>>& placed = offsets_[t.name];
  if (std::find(placed.begin(), placed.end(), offset) != placed.end())
    return data_loss("the piece of '{}' at [{}] came twice", t.name, fmt::join(offset, ", "));
  placed.push_back(offset);
  Shape shape;
  place_piece(t.shape, offset, piece, std::span<float>(const_cast<float*>(t.values.data()), t.values.size()), &shape,
              &whole);
  covered_[t.name] += num_elements(piece);
  return {};
}

Status WholeTensors::check_whole(const std::vector<std::string>& variables) const {
  for (const std::string& v : variables)
    if (values.count(v) == 0) return data_loss("no piece of variable '{}' came", v);
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
