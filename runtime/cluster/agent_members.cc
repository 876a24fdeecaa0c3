// Live membership on every agent: a plan on some of the machine list's
// ranks, and the steps a node keeps in memory to go on from.
#include <algorithm>
#include <set>
#include <system_error>

#include <fmt/ranges.h>

#include "runtime/cluster/agent_impl.h"
#include "runtime/cluster/memory_pieces.h"
#include "runtime/cluster/memory_transfer.h"
#include "runtime/node/carried_state.h"

namespace rill::agent_internal {

Status Agent::place_run(int64_t job, const std::vector<int>& members, bool keep_steps, int64_t kept_step,
                        int64_t start_step, std::vector<std::string> variables, RunOptions& run, int* nodes) {
  run.node = options_.rank;
  run.transport = transport_.get();
  *nodes = world_;
  if (!members.empty()) {
    const std::set<int> distinct(members.begin(), members.end());
    if (distinct.size() != members.size() || members.front() != 0 || *distinct.begin() < 0 ||
        *distinct.rbegin() >= world_)
      return invalid_argument("the master sent a plan on nodes [{}]: not distinct ranks of the {} machines, node 0 first",
                              fmt::join(members, ", "), world_);
    const auto me = std::find(members.begin(), members.end(), options_.rank);
    if (me == members.end())
      return invalid_argument("the master sent {} a plan on nodes [{}], which do not include it", this->me(),
                              fmt::join(members, ", "));
    run.node = static_cast<int>(me - members.begin());
    *nodes = static_cast<int>(members.size());
    if (*nodes < world_) {
      MutexLock lock(groups_mu_);
      auto& group = groups_[members];
      if (!group) group = std::make_unique<comm::GroupTransport>(*transport_, members);
      run.transport = group.get();
    }
  }
  // From this node's memory: the model whole, for any plan; else (a layout
  // that splits variables across nodes, going on as it ran) each piece the
  // run's plan gives this node, as it kept it.
  const bool whole = kept_.whole();
  if (kept_step >= 0 && whole) {
    Status taken = kept_.values_at(job, kept_step, &run.initial_values, &run.initial_state);
    if (!taken.ok()) return taken.with_context(fmt::format("starting from {}'s memory at step {}", me(), kept_step));
  }
  if (kept_step >= 0 && !whole) {
    if (!keep_steps)
      return invalid_argument("{}: starting from its own pieces in memory at step {} needs the run to keep steps",
                              me(), kept_step);
    run.start_from_kept = kept_step;
    run.keeper_job = job;
  }
  // What its compressed all-reduces carried then (this node's error, and
  // PowerSGD's Q): its boxings go on with it (node_bodies.cc).
  if (kept_step >= 0)
    for (auto& [name, values] : kept_.carried_at(job, kept_step)) run.initial_state[name] = std::move(values);
  if (keep_steps) kept_.begin_run(job, std::move(variables), start_step);
  run.keeper = keep_steps ? &kept_ : nullptr;
  return {};
}

void Agent::tell_kept(ctl::Done& done) const {
  if (auto steps = kept_.steps()) {
    done.kept_first = steps->first;
    done.kept_last = steps->second;
  }
  done.kept_whole = kept_.whole();
  done.replica_own = replicas_.own_steps(done.job_id);
  for (auto& [source, steps] : replicas_.replica_steps(done.job_id))
    done.replicas.push_back(ctl::Done::Replica{source, std::move(steps)});
}

StatusOr<std::unique_ptr<Replicator>> Agent::replicate(int64_t job, int phase, const std::vector<int>& members,
                                                       int64_t every, int copies, std::string_view node_plan,
                                                       RunOptions& run, int nodes,
                                                       const std::map<std::string, Shape>& shapes, int64_t last_step,
                                                       int* pieces) {
  *pieces = 0;
  if (every <= 0) return std::unique_ptr<Replicator>();
  replicas_.begin_run(job, phase);  // an earlier phase's pieces were another plan's
  if (nodes < 2) return std::unique_ptr<Replicator>();
  RILL_ASSIGN_OR_RETURN(std::vector<SnapshotPiece> own, snapshot_pieces(node_plan));
  std::erase_if(own, [](const SnapshotPiece& p) { return p.name.starts_with(kCarriedPrefix); });
  *pieces = static_cast<int>(own.size());
  // Plan node n sends to n + 1, ..., n + copies and keeps n - 1's, ...,
  // n - copies', around the ring (a ring of fewer nodes: every other one).
  auto rank_of = [&](int node) { return members.empty() ? node : members[static_cast<size_t>(node)]; };
  const int reach = std::clamp(copies, 1, nodes - 1);
  Replicator::Options options;
  options.transport = run.transport;
  options.store = &replicas_;
  options.job = job;
  options.phase = phase;
  options.tag_base = run.tag_base;
  for (int k = 1; k <= reach; ++k) {
    options.to.push_back((run.node + k) % nodes);
    options.from.push_back((run.node + nodes - k) % nodes);
    options.from_ranks.push_back(rank_of(options.from.back()));
  }
  options.most = options_.max_message_bytes;
  options.most_bytes = most_piece_bytes(shapes);
  options.last_step = last_step;
  options.patience = std::chrono::milliseconds(static_cast<int64_t>(run.stall_timeout_s * 1000));
  options.me = me();
  std::unique_ptr<Replicator> replicator;
  try {
    replicator = std::make_unique<Replicator>(std::move(own), std::move(options));
  } catch (const std::system_error& e) {  // a thread the machine could not start
    return Status(Code::kUnavailable, fmt::format("{}: could not start the replicas' threads: {}", me(), e.what()));
  }
  run.replica_every = every;
  // Its chunks, and a window of them unread, beside the plan's messages.
  run.side_message_bytes = kMemoryChunkBytes + 64;
  run.side_unread_bytes = 2 * kMemoryWindow * (kMemoryChunkBytes + 4096);
  run.on_replica = [r = replicator.get()](int64_t done, VariablePiece piece) { r->add(done, std::move(piece)); };
  return replicator;
}

StatusOr<std::vector<std::string>> Agent::gather_messages(int64_t job, int64_t step, bool own,
                                                          const std::vector<int>& replicas_of) const {
  std::vector<std::string> out;
  if (own) {
    RILL_ASSIGN_OR_RETURN(ReplicaStore::Messages held, replicas_.own_at(job, step));
    out.insert(out.end(), held->begin(), held->end());
  }
  for (int source : replicas_of) {
    RILL_ASSIGN_OR_RETURN(ReplicaStore::Messages held, replicas_.replica_at(job, source, step));
    out.insert(out.end(), held->begin(), held->end());
  }
  return out;
}

}  // namespace rill::agent_internal
