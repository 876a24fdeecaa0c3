#include "runtime/node/step_keeper.h"

#include <algorithm>
#include <limits>

#include <fmt/ranges.h>

#include "runtime/node/plan_reader.h"

namespace rill {

int StepKeeper::declare(const std::string& name, const Shape& logical, const std::vector<int64_t>& offset,
                        const Shape& shape, const std::vector<std::string>& state_names, bool trained) {
  MutexLock lock(mu_);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    Piece& p = pieces_[i];
    if (p.name != name || p.offset != offset) continue;
    if (p.run == run_) return -1;
    if (p.shape != shape || p.logical != logical || p.state_names != state_names || p.trained != trained) {
      // Not the piece it was (another layout): what it held is not this one's.
      p = Piece{name, logical, shape, offset, state_names, trained, run_, {}};
      return static_cast<int>(i);
    }
    p.run = run_;
    return static_cast<int>(i);
  }
  pieces_.push_back(Piece{name, logical, shape, offset, state_names, trained, run_, {}});
  return static_cast<int>(pieces_.size()) - 1;
}

void StepKeeper::keep(int piece, int64_t steps_done, std::span<const float> model,
                      std::span<const std::span<const float>> state) {
  MutexLock lock(mu_);
  if (piece < 0 || piece >= static_cast<int>(pieces_.size())) return;
  Piece& p = pieces_[static_cast<size_t>(piece)];
  // The version already at this step, else the older one, takes the new
  // values; the other stays only when it is the step before.
  Version* at = p.versions[1].steps_done == steps_done ? &p.versions[1] : nullptr;
  if (p.versions[0].steps_done == steps_done) at = &p.versions[0];
  if (!at) {
    at = p.versions[0].steps_done < p.versions[1].steps_done ? &p.versions[0] : &p.versions[1];
    Version& other = at == &p.versions[0] ? p.versions[1] : p.versions[0];
    if (other.steps_done != steps_done - 1) other.steps_done = -1;
  }
  Version& v = *at;
  v.steps_done = steps_done;
  v.model.assign(model.begin(), model.end());
  v.state.resize(state.size());
  for (size_t i = 0; i < state.size(); ++i) v.state[i].assign(state[i].begin(), state[i].end());
}

std::optional<std::pair<int64_t, int64_t>> StepKeeper::steps() const {
  MutexLock lock(mu_);
  if (pieces_.empty()) return std::nullopt;
  // Every piece holds two steps (or one): the steps common to all.
  int64_t first = std::numeric_limits<int64_t>::min(), last = std::numeric_limits<int64_t>::max();
  for (const Piece& p : pieces_) {
    if (!p.trained) continue;  // the same at every step
    const int64_t a = p.versions[0].steps_done, b = p.versions[1].steps_done;
    const int64_t newer = std::max(a, b), older = std::min(a, b);
    if (newer < 0) return std::nullopt;
    // Two kept steps one apart make a range; otherwise only the newer.
    first = std::max(first, older >= 0 && older + 1 == newer ? older : newer);
    last = std::min(last, newer);
  }
  if (first > last || last == std::numeric_limits<int64_t>::max()) return std::nullopt;
  return std::make_pair(first, last);
}

std::map<std::string, int64_t> StepKeeper::uncovered() const {
  std::map<std::string, int64_t> missing;
  for (const Piece& p : pieces_) missing.try_emplace(p.name, num_elements(p.logical));
  for (const Piece& p : pieces_) missing[p.name] -= num_elements(p.shape);
  return missing;
}

bool StepKeeper::whole() const {
  MutexLock lock(mu_);
  const std::map<std::string, int64_t> missing = uncovered();
  return !variables_.empty() && std::all_of(variables_.begin(), variables_.end(), [&](const std::string& v) {
    auto it = missing.find(v);
    return it != missing.end() && it->second == 0;
  });
}

const StepKeeper::Version* StepKeeper::version_at(const Piece& piece, int64_t steps_done) const {
  for (const Version& v : piece.versions)
    if (v.steps_done == steps_done || (!piece.trained && v.steps_done >= 0)) return &v;
  return nullptr;
}

Status StepKeeper::values_at(int64_t job, int64_t steps_done, std::map<std::string, std::vector<float>>* values,
                             std::map<std::string, std::vector<float>>* state) const {
  MutexLock lock(mu_);
  if (job != job_)
    return Status(Code::kFailedPrecondition,
                  fmt::format("this node's memory holds job {}'s variables, not job {}'s", job_, job));
  for (const auto& [name, missing] : uncovered())
    if (missing != 0)
      return Status(Code::kFailedPrecondition, fmt::format("this node holds only part of variable '{}'", name));
  std::map<std::string, Shape> shapes;
  for (const Piece& p : pieces_) {
    const Version* v = version_at(p, steps_done);
    if (!v)
      return Status(Code::kFailedPrecondition,
                    fmt::format("variable '{}' is not held in memory at step {}", p.name, steps_done));
    if (static_cast<int64_t>(v->model.size()) != num_elements(p.shape) || v->state.size() != p.state_names.size())
      return internal_error("variable '{}' was kept with {} values, its piece {} has {}", p.name, v->model.size(),
                            shape_string(p.shape), num_elements(p.shape));
    // place_piece only reads the piece.
    place_piece(p.logical, p.offset, p.shape, std::span<float>(const_cast<float*>(v->model.data()), v->model.size()),
                &shapes[p.name], &(*values)[p.name]);
    for (size_t i = 0; i < p.state_names.size(); ++i) {
      const std::string name = p.name + "/" + p.state_names[i];
      const std::vector<float>& s = v->state[i];
      place_piece(p.logical, p.offset, p.shape, std::span<float>(const_cast<float*>(s.data()), s.size()),
                  &shapes[name], &(*state)[name]);
    }
  }
  return {};
}

Status StepKeeper::piece_at(int64_t job, int64_t steps_done, const std::string& name,
                            const std::vector<int64_t>& offset, const Shape& shape, std::vector<float>* model,
                            std::vector<std::vector<float>>* state) const {
  MutexLock lock(mu_);
  if (job != job_)
    return Status(Code::kFailedPrecondition,
                  fmt::format("this node's memory holds job {}'s variables, not job {}'s", job_, job));
  for (const Piece& p : pieces_) {
    if (p.name != name || p.offset != offset) continue;
    if (p.shape != shape)
      return Status(Code::kFailedPrecondition,
                    fmt::format("this node kept '{}' at offset [{}] as {}, not {}", name, fmt::join(offset, ", "),
                                shape_string(p.shape), shape_string(shape)));
    const Version* v = version_at(p, steps_done);
    if (!v)
      return Status(Code::kFailedPrecondition,
                    fmt::format("variable '{}' at offset [{}] is not held in memory at step {}", name,
                                fmt::join(offset, ", "), steps_done));
    *model = v->model;
    *state = v->state;
    return {};
  }
  return Status(Code::kFailedPrecondition, fmt::format("this node holds no piece of '{}' at offset [{}]", name,
                                                       fmt::join(offset, ", ")));
}

void StepKeeper::keep_carried(const std::string& name, int64_t steps_done, std::span<const float> values) {
  MutexLock lock(mu_);
  auto it = carried_.find(name);
  if (it == carried_.end()) it = carried_.emplace(name, std::array<CarriedVersion, 3>{}).first;
  // The version at this step, else the oldest, takes the values.
  CarriedVersion* at = &it->second[0];
  for (CarriedVersion& v : it->second) {
    if (v.steps_done == steps_done) {
      at = &v;
      break;
    }
    if (v.steps_done < at->steps_done) at = &v;
  }
  at->steps_done = steps_done;
  at->values.assign(values.begin(), values.end());
}

std::map<std::string, std::vector<float>> StepKeeper::carried_at(int64_t job, int64_t steps_done) const {
  MutexLock lock(mu_);
  std::map<std::string, std::vector<float>> out;
  if (job != job_ || steps_done < 0) return out;
  for (const auto& [name, versions] : carried_)
    for (const CarriedVersion& v : versions)
      if (v.steps_done == steps_done) out[name] = v.values;
  return out;
}

void StepKeeper::begin_run(int64_t job, std::vector<std::string> variables, int64_t start) {
  MutexLock lock(mu_);
  if (job != job_) pieces_.clear(), carried_.clear();
  for (Piece& p : pieces_)
    for (Version& v : p.versions)
      if (v.steps_done > start) v.steps_done = -1;
  for (auto& [name, versions] : carried_)
    for (CarriedVersion& v : versions)
      if (v.steps_done > start) v.steps_done = -1;
  job_ = job;
  ++run_;
  variables_ = std::move(variables);
}

}  // namespace rill
