#include "actor/powersgd.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace rill {
namespace {

uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Columns of p [rows, r] made orthonormal in order: Gram-Schmidt in
// double, each projection taken twice ("twice is enough": one pass leaves
// a column that was nearly dependent not orthogonal). A column with less
// than 1e-5 of its norm left (dependent on those before it: the sum of
// lower rank than r) becomes zero; the projection P P^T stays one.
// `work`: rows * r doubles; (*dropped)[at + c] says whether column c became zero.
void orthonormalize(float* p, size_t rows, size_t r, double* work, std::vector<bool>* dropped, size_t at) {
  for (size_t i = 0; i < rows * r; ++i) work[i] = p[i];
  for (size_t c = 0; c < r; ++c) {
    double before = 0;
    for (size_t i = 0; i < rows; ++i) before += work[i * r + c] * work[i * r + c];
    for (int pass = 0; pass < 2; ++pass)
      for (size_t k = 0; k < c; ++k) {
        double dot = 0;
        for (size_t i = 0; i < rows; ++i) dot += work[i * r + k] * work[i * r + c];
        for (size_t i = 0; i < rows; ++i) work[i * r + c] -= dot * work[i * r + k];
      }
    double after = 0;
    for (size_t i = 0; i < rows; ++i) after += work[i * r + c] * work[i * r + c];
    const bool kept = after > 1e-10 * before && std::isfinite(after);
    (*dropped)[at + c] = !kept;
    const double scale = kept ? 1.0 / std::sqrt(after) : 0.0;
    for (size_t i = 0; i < rows; ++i) work[i * r + c] *= scale;
  }
  for (size_t i = 0; i < rows * r; ++i) p[i] = static_cast<float>(work[i]);
}

bool finite(const float* v, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) return false;
  return true;
}

}  // namespace

PowerSgdAllReduce::PowerSgdAllReduce(PowerSgdLayout layout, int world, uint64_t seed)
    : layout_(std::move(layout)),
      world_(world < 1 ? 1 : world),
      seed_(seed),
      first_(layout_.first),
      second_(layout_.second),
      error_(layout_.error, 0.0f) {
  size_t widest = 0;
  for (const PowerSgdLayout::Member& m : layout_.members)
    if (m.low_rank) {
      start_q(m);
      widest = std::max(widest, m.rows * static_cast<size_t>(layout_.rank));
    }
  orthonormal_.resize(widest);
  dropped_.resize(layout_.members.size() * static_cast<size_t>(layout_.rank));
}

// Column c of the member's Q, uniform in [-1, 1), drawn from (seed, the
// member's offset, `draw`, c): the same on every node.
void PowerSgdAllReduce::draw_q(const PowerSgdLayout::Member& m, size_t c, uint64_t draw) {
  uint64_t state = seed_ * 0x2545f4914f6cdd1dull + m.offset;
  state = splitmix64(&state) ^ (draw * 0x9e3779b97f4a7c15ull + c);
  const size_t r = static_cast<size_t>(layout_.rank);
  for (size_t j = 0; j < m.cols; ++j)
    second_[m.q + j * r + c] = static_cast<float>(static_cast<double>(splitmix64(&state) >> 11) * 0x1.0p-52 - 1.0);
}

// The first Q, and Q again after an overflow: draw 0.
void PowerSgdAllReduce::start_q(const PowerSgdLayout::Member& m) {
  for (size_t c = 0; c < static_cast<size_t>(layout_.rank); ++c) draw_q(m, c, 0);
}

Status PowerSgdAllReduce::restore(std::span<const float> error, std::span<const float> q,
                                  uint64_t compressed_steps) {
  if (error.size() != error_.size() || q.size() != second_.size())
    return invalid_argument("PowerSGD carries {} error values and {} of Q here; {} and {} were given", error_.size(),
                            second_.size(), error.size(), q.size());
  std::copy(error.begin(), error.end(), error_.begin());
  std::copy(q.begin(), q.end(), second_.begin());
  steps_ = compressed_steps;
  return {};
}

Status PowerSgdAllReduce::run(comm::Collectives& collectives, std::span<float> buffer, uint64_t tag,
                              comm::ReduceOp op) {
  if (op != comm::ReduceOp::kSum && op != comm::ReduceOp::kAverage)
    return invalid_argument("PowerSGD sums or averages gradients, not {}", comm::reduce_op_name(op));
  if (buffer.size() != layout_.elements || collectives.world() != world_)
    return internal_error("PowerSGD was laid out for {} values among {} ranks, called with {} among {}",
                          layout_.elements, world_, buffer.size(), collectives.world());
  const size_t r = static_cast<size_t>(layout_.rank);
  ++steps_;  // this step's draws differ from the first Q's (draw 0)
  for (const PowerSgdLayout::Member& m : layout_.members) {
    float* M = buffer.data() + m.offset;
    if (!m.low_rank) {
      std::copy(M, M + m.rows * m.cols, first_.data() + m.p);
      continue;
    }
    const float* E = error_.data() + m.error;
    for (size_t i = 0; i < m.rows * m.cols; ++i) M[i] += E[i];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m.rows), static_cast<int>(r),
                static_cast<int>(m.cols), 1.0f, M, static_cast<int>(m.cols), second_.data() + m.q,
                static_cast<int>(r), 0.0f, first_.data() + m.p, static_cast<int>(r));
  }
  RILL_RETURN_IF_ERROR(collectives.all_reduce(first_, first_, tag, comm::ReduceOp::kSum));
  for (size_t k = 0; k < layout_.members.size(); ++k) {
    const PowerSgdLayout::Member& m = layout_.members[k];
    if (!m.low_rank) continue;
    float* P = first_.data() + m.p;
    orthonormalize(P, m.rows, r, orthonormal_.data(), &dropped_, k * r);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(m.cols), static_cast<int>(r),
                static_cast<int>(m.rows), 1.0f, buffer.data() + m.offset, static_cast<int>(m.cols), P,
                static_cast<int>(r), 0.0f, second_.data() + m.q, static_cast<int>(r));
  }
  if (layout_.second > 0) RILL_RETURN_IF_ERROR(collectives.all_reduce(second_, second_, tag, comm::ReduceOp::kSum));
  const float world = static_cast<float>(world_);
  const bool average = op == comm::ReduceOp::kAverage;
  for (size_t k = 0; k < layout_.members.size(); ++k) {
    const PowerSgdLayout::Member& m = layout_.members[k];
    float* M = buffer.data() + m.offset;
    if (!m.low_rank) {
      const float* sum = first_.data() + m.p;
      for (size_t i = 0; i < m.rows * m.cols; ++i) M[i] = average ? sum[i] / world : sum[i];
      continue;
    }
    const float* P = first_.data() + m.p;
    const float* Q = second_.data() + m.q;
    float* E = error_.data() + m.error;
    for (size_t i = 0; i < m.rows; ++i)
      for (size_t j = 0; j < m.cols; ++j) {
        float sum = 0.0f;
        for (size_t c = 0; c < r; ++c) sum += P[i * r + c] * Q[j * r + c];
        const float mean = sum / world;
        E[i * m.cols + j] = M[i * m.cols + j] - mean;
        M[i * m.cols + j] = average ? mean : sum;
      }
    // An overflowed step: its output is not finite (and skipped); nothing
    // of it carries on. Q is the same on every node, so all start again.
    if (!finite(Q, m.cols * r)) {
      std::fill(E, E + m.rows * m.cols, 0.0f);
      start_q(m);
    } else {
      for (size_t i = 0; i < m.rows * m.cols; ++i)
        if (!std::isfinite(E[i])) E[i] = 0.0f;
      // A column the sum did not fill (its rank was below r, or it was
      // zero) has Q's column zero, which would keep it zero from then on:
      // it starts again from fresh values, alike on every node (they hold
      // the same P).
      for (size_t c = 0; c < r; ++c)
        if (dropped_[k * r + c]) draw_q(m, c, steps_);
    }
  }
  return {};
}

}  // namespace rill
