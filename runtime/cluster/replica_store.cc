#include "runtime/cluster/replica_store.h"

#include <fmt/format.h>

namespace rill {

namespace {

std::vector<int64_t> steps_of(const std::map<int64_t, ReplicaStore::Messages>& held) {
  std::vector<int64_t> out;
  for (const auto& [step, messages] : held) out.push_back(step);
  return out;
}

void keep_newest(std::map<int64_t, ReplicaStore::Messages>& held, size_t most) {
  while (held.size() > most) held.erase(held.begin());
}

}  // namespace

bool ReplicaStore::current(int64_t job, int phase) {
  if (job < job_) return false;  // an earlier job's, late: job numbers only grow
  if (job != job_) {
    own_.clear();
    replicas_.clear();
    job_ = job;
    phase_ = phase;
  }
  return phase == phase_;
}

void ReplicaStore::begin_run(int64_t job, int phase) {
  MutexLock lock(mu_);
  if (job == job_ && phase == phase_) return;
  own_.clear();
  replicas_.clear();
  job_ = job;
  phase_ = phase;
}

ReplicaStore::Messages ReplicaStore::keep_own(int64_t job, int phase, int64_t step,
                                              std::vector<std::string> messages) {
  auto held = std::make_shared<const std::vector<std::string>>(std::move(messages));
  MutexLock lock(mu_);
  if (!current(job, phase)) return held;
  own_[step] = held;
  keep_newest(own_, kOwnSteps);
  return held;
}

void ReplicaStore::keep_replica(int64_t job, int phase, int source, int64_t step,
                                std::vector<std::string> messages) {
  auto held = std::make_shared<const std::vector<std::string>>(std::move(messages));
  MutexLock lock(mu_);
  if (!current(job, phase)) return;
  auto& of = replicas_[source];
  of[step] = std::move(held);
  keep_newest(of, kReplicaSteps);
}

std::vector<int64_t> ReplicaStore::own_steps(int64_t job) const {
  MutexLock lock(mu_);
  return job == job_ ? steps_of(own_) : std::vector<int64_t>{};
}

std::map<int, std::vector<int64_t>> ReplicaStore::replica_steps(int64_t job) const {
  MutexLock lock(mu_);
  std::map<int, std::vector<int64_t>> out;
  if (job == job_)
    for (const auto& [source, held] : replicas_) out[source] = steps_of(held);
  return out;
}

StatusOr<ReplicaStore::Messages> ReplicaStore::own_at(int64_t job, int64_t step) const {
  MutexLock lock(mu_);
  auto it = own_.find(step);
  if (job != job_ || it == own_.end())
    return Status(Code::kNotFound, fmt::format("this node holds no replica of its own pieces of job {} after step {}",
                                               job, step));
  return it->second;
}

StatusOr<ReplicaStore::Messages> ReplicaStore::replica_at(int64_t job, int source, int64_t step) const {
  MutexLock lock(mu_);
  if (auto of = replicas_.find(source); job == job_ && of != replicas_.end())
    if (auto it = of->second.find(step); it != of->second.end()) return it->second;
  return Status(Code::kNotFound, fmt::format("this node holds no replica of rank {}'s pieces of job {} after step {}",
                                             source, job, step));
}

int64_t ReplicaStore::bytes() const {
  MutexLock lock(mu_);
  int64_t total = 0;
  auto add = [&](const std::map<int64_t, Messages>& held) {
    for (const auto& [step, messages] : held)
      for (const std::string& m : *messages) total += static_cast<int64_t>(m.size());
  };
  add(own_);
  for (const auto& [source, held] : replicas_) add(held);
  return total;
}

}  // namespace rill
