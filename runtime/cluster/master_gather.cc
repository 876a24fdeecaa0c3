// A live job whose layout splits variables across nodes, going on without a
// lost node (docs/FAULTS.md "When a node fails"): every node copied its
// pieces to the next members' memory every few steps (replicator.h; the
// next `--replica-copies` of them); node 0 finds a step at which every
// survivor holds its own pieces and, for each lost node, one of its
// surviving buddies its replica (replica_choice.h), gathers them over the
// data plane into the whole model, and every other member starts from node
// 0's memory with the plan on the nodes that remain.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "runtime/cluster/master.h"
#include "runtime/cluster/memory_pieces.h"
#include "runtime/cluster/memory_transfer.h"
#include "runtime/cluster/replica_choice.h"

namespace rill::agent_internal {

StatusOr<Membership> Master::from_replicas(const Membership& ended, Membership next, int64_t at) {
  // The ring the replicas went around: the last phase that ran (an attempt
  // that failed before running, a gather lost midway, changed nothing).
  std::vector<int> ran = replica_ring_.empty() ? ended.members : replica_ring_;
  if (ran.empty())
    for (int r = 0; r < world_; ++r) ran.push_back(r);
  // A rank holds its own pieces when it ran, is up, and is the agent that
  // said what it kept (a restarted agent's predecessor's died with it).
  auto holder = [&](int r) { return next.member(r) && kept_by_node_.count(r) != 0; };
  auto copies = [&](int r) {
    auto it = replica_pieces_.find(r);
    return it == replica_pieces_.end() || it->second > 0;  // not known: as if it did
  };
  ReplicaHolders holders = find_replica_holders(ran, ended.replica_copies, kept_by_node_, holder, copies,
                                                [&](int r) { return node_name(options_.machines, r); });
  std::optional<std::set<int64_t>>& common = holders.steps;
  if (holders.lost.empty() && at < 0) return Status(Code::kNotFound, "no node that ran the attempt was lost");
  // Taking a node back: at the step the phase ended, which every member holds.
  if (common && at >= 0) std::erase_if(*common, [&](int64_t s) { return s != at; });
  std::string problem = holders.problem;
  int64_t step = problem.empty() && common && !common->empty() ? *common->rbegin() : -1;
  // The model node 0 gathered last is whole, at its step: nodes lost before
  // the next replica (or with their buddies) go on from it.
  const bool from_gathered = gathered_ && gathered_->step >= step && (at < 0 || gathered_->step == at);
  if (from_gathered) step = gathered_->step;
  if (step < 0 && problem.empty())
    problem = at >= 0 ? fmt::format("not every node holds its own pieces after step {} (replicas every {} steps)", at,
                                    ended.replica_every)
                      : fmt::format("no step at which every node that remains holds its own pieces and {}'s replica "
                                    "is held (replicas every {} steps)",
                                    holders.lost, ended.replica_every);
  if (step < 0) return Status(Code::kFailedPrecondition, problem);
  std::map<int, GatherFrom> gather;
  if (!from_gathered) gather = gather_at(holders, kept_by_node_, step);
  next.kept_step = step;
  next.gather = std::move(gather);
  next.from_replicas = true;
  next.newcomers.clear();
  for (int r : next.members)
    if (r != 0) next.newcomers.push_back(r);
  return next;
}

Status Master::gather_alone(int64_t job_id, int phase, const Membership& membership, double patience_s) {
  RILL_ASSIGN_OR_RETURN(const uint64_t tag_base, run_tag_base(job_id, phase));
  {
    MutexLock lock(phase_mu_);  // the senders' failures come as its acks
    phase_ = PhaseState{job_id, phase, {}, {}, {}, {}};
    phase_.members = membership.members;
    if (stopping_) return Status(Code::kAborted, "the cluster is shutting down");
  }
  return gather_pieces(job_id, phase, tag_base, membership, patience_s);
}

Status Master::gather_pieces(int64_t job_id, int phase, uint64_t tag_base, const Membership& membership,
                             double patience_s) {
  const int64_t step = membership.kept_step;
  const auto started = std::chrono::steady_clock::now();
  const auto patience = std::chrono::milliseconds(static_cast<int64_t>(patience_s * 1000));
  const StreamTags tags{tag_base + kGatherChunkTag, tag_base + kGatherAckTag};
  // The senders' chunks on this phase's tags, a window of them at a time.
  transport_->accept_tags(tag_base, tag_base + kTagsPerRun);
  transport_->limit_message_bytes(0);
  transport_->limit_unread_bytes(2 * kMemoryWindow * (kMemoryChunkBytes + 4096));
  std::vector<int> senders;
  for (const auto& [r, from] : membership.gather)
    if (r != 0) {
      senders.push_back(r);
      post_to_node(r, ctl::Gather{job_id, phase, tag_base, step, from.own, from.replicas_of, patience_s});
    }
  // Each sender's messages, received at once, each placed in the whole
  // tensors as it comes: node 0 holds the model and at most one message a
  // sender, whatever a sender says. A sender that fails says so in a
  // PlanAck of this phase, and one lost is named. What one sender may send:
  // its pieces and replicas are parts of the model and its optimizer state,
  // so at most what all of them weigh as messages.
  const uint64_t most = most_piece_bytes(membership.shapes);
  WholeTensors whole(membership.shapes);
  if (auto own = membership.gather.find(0); own != membership.gather.end()) {
    auto messages = gather_messages(job_id, step, own->second.own, own->second.replicas_of);
    if (!messages.ok()) return messages.status().with_context(node_name(options_.machines, 0));
    for (const std::string& m : *messages) RILL_RETURN_IF_ERROR(whole.add_message(m, job_id, step));
  }
  Mutex whole_mu;
  std::atomic<int64_t> bytes{0};
  std::vector<Status> failed(senders.size());
  std::vector<std::thread> receivers;
  for (size_t i = 0; i < senders.size(); ++i)
    receivers.emplace_back([&, i] {
      const int r = senders[i];
      const std::string who = node_name(options_.machines, r);
      auto deadline = comm::Clock::now() + patience;  // for the next message: a gather that moves goes on
      uint64_t sent = 0, count = 0, index = 0;
      for (;;) {
        auto header = receive_stream_header(*transport_, r, tags, comm::Clock::now() + std::chrono::milliseconds(200),
                                            kMemoryMessageBytes + (size_t{1} << 20));
        if (!header.ok() && header.status().code() == Code::kDeadlineExceeded) {
          MutexLock lock(phase_mu_);
          if (auto ack = phase_.acks.find(r); ack != phase_.acks.end() && !ack->second.error.empty()) {
            failed[i] = Status(ack->second.code == Code::kOk ? Code::kUnavailable : ack->second.code, ack->second.error);
            return;
          }
          if (lost_[r] || comm::Clock::now() > deadline) {
            failed[i] = Status(Code::kUnavailable, fmt::format("{} sent no pieces within {} s", who, patience_s));
            return;
          }
          continue;
        }
        if (!header.ok()) {
          failed[i] = header.status().with_context(who);
          return;
        }
        if (header->count == 0 && index == 0) return;
        // Messages 0, 1, ... of one count, of the step asked for, within
        // what the model weighs (checked before a byte is taken).
        if (index == 0) count = header->count;
        if (header->index != index || header->count != count || header->step != step) {
          failed[i] = data_loss("{} sent message {} of {} after step {} where message {} of {} after step {} was due",
                                who, header->index, header->count, header->step, index, count, step);
          return;
        }
        if (sent + header->bytes > most) {
          failed[i] = data_loss("{} sent {} bytes of pieces, more than the model and its optimizer state weigh ({})",
                                who, sent + header->bytes, most);
          return;
        }
        sent += header->bytes;
        auto body = receive_stream_body(*transport_, r, tags, *header, patience);
        if (!body.ok()) {
          failed[i] = body.status().with_context(who);
          return;
        }
        {
          MutexLock lock(whole_mu);
          if (Status placed = whole.add_message(*body, job_id, step); !placed.ok()) {
            failed[i] = placed.with_context(fmt::format("the pieces from {}", who));
            return;
          }
        }
        bytes.fetch_add(static_cast<int64_t>(body->size()), std::memory_order_relaxed);
        if (++index == count) return;
        deadline = comm::Clock::now() + patience;
      }
    });
  for (std::thread& t : receivers) t.join();
  for (const Status& f : failed)
    if (!f.ok())
      return Status(f.code() == Code::kDataLoss ? Code::kDataLoss : Code::kUnavailable,
                    fmt::format("gathering the pieces after step {}: {}", step, f.message()));
  if (Status complete = whole.check_whole(membership.variables); !complete.ok())
    return Status(Code::kDataLoss, fmt::format("gathering the pieces after step {}: {}", step, complete.message()));
  spdlog::info("job {}: node 0 gathered the model after step {} from {} node(s) ({} bytes over the data plane) in "
               "{:.3f} s",
               job_id, step, senders.size() + (membership.gather.count(0) ? 1 : 0), bytes.load(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  gathered_ = Gathered{job_id, step, std::move(whole.values), std::move(whole.state)};
  return {};
}

}  // namespace rill::agent_internal
