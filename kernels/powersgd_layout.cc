#include "kernels/powersgd_layout.h"

namespace rill {

PowerSgdLayout powersgd_layout(const std::vector<Shape>& tensors, int rank) {
  PowerSgdLayout layout;
  layout.rank = rank < 1 ? 1 : rank;
  const size_t r = static_cast<size_t>(layout.rank);
  for (const Shape& shape : tensors) {
    PowerSgdLayout::Member m;
    m.offset = layout.elements;
    m.rows = shape.empty() ? 1 : static_cast<size_t>(shape[0]);
    m.cols = 1;
    for (size_t a = 1; a < shape.size(); ++a) m.cols *= static_cast<size_t>(shape[a]);
    const size_t size = m.rows * m.cols;
    m.low_rank = shape.size() >= 2 && r * (m.rows + m.cols) * 2 < size;
    if (m.low_rank) {
      m.p = layout.first;
      layout.first += m.rows * r;
      m.q = layout.second;
      layout.second += m.cols * r;
      m.error = layout.error;
      layout.error += size;
    }
    layout.elements += size;
    layout.members.push_back(m);
  }
  // The whole tensors follow the P factors in the first buffer.
  for (PowerSgdLayout::Member& m : layout.members)
    if (!m.low_rank) {
      m.p = layout.first;
      layout.first += m.rows * m.cols;
    }
  return layout;
}

}  // namespace rill
