#include "runtime/cluster/replicator.h"

#include <algorithm>
#include <system_error>
#include <thread>

#include <spdlog/spdlog.h>

#include "runtime/cluster/memory_pieces.h"
#include "runtime/cluster/memory_transfer.h"
#include "runtime/node/carried_state.h"

namespace rill {

namespace ctl = control;

namespace {

constexpr StreamTags replica_tags(uint64_t tag_base) {
  return StreamTags{tag_base + kReplicaChunkTag, tag_base + kReplicaAckTag};
}
// A stream's message: the tensors and a little encoding around them.
constexpr size_t kMostStreamBytes = kMemoryMessageBytes + (size_t{1} << 20);

}  // namespace

Replicator::Replicator(std::vector<SnapshotPiece> pieces, Options options) : options_(std::move(options)) {
  std::erase_if(pieces, [](const SnapshotPiece& p) { return p.name.starts_with(kCarriedPrefix); });
  has_pieces_ = !pieces.empty();
  collector_ = std::make_unique<CheckpointCollector>(
      graph::Job{}, std::move(pieces),
      [this](int64_t step, std::vector<TensorPiece> tensors) { return send(step, std::move(tensors)); },
      [this](NodeCheckpoint sent) {
        if (!sent.status.ok() && !stopping_.load())
          spdlog::warn("{}: its pieces after step {} did not reach the next nodes' memory: {}", options_.me,
                       sent.step, sent.status.message());
      });
  {
    MutexLock lock(mu_);
    last_received_.assign(options_.from.size(), -1);
    receiving_.assign(options_.from.size(), true);
  }
  try {
    for (size_t source = 0; source < options_.from.size(); ++source)
      receivers_.emplace_back([this, source] {
        receive_loop(source);
        MutexLock lock(mu_);
        receiving_[source] = false;
        received_cv_.notify_all();
      });
  } catch (...) {  // a thread that could not start: those that did end before the error goes on
    stop();
    throw;
  }
}

Replicator::~Replicator() {
  stop();
  collector_.reset();  // its thread ends once a step under way gives up (the tags are cancelled)
}

void Replicator::add(int64_t steps_done, VariablePiece piece) {
  if (!stopping_.load()) collector_->add(steps_done, std::move(piece));
}

void Replicator::finish(int64_t last) {
  if (stopping_.load() || last <= 0) return;
  // The collector sends each step in turn, every chunk acknowledged (or
  // given up after the patience); a node with no pieces says so, as its
  // buddies wait for word of this step.
  const Status sent = has_pieces_ ? collector_->finish() : send_to_buddies(last, {});
  if (!sent.ok())
    spdlog::warn("{}: its pieces after step {} did not all reach the next nodes' memory: {}", options_.me, last,
                 sent.message());
  // Every node of the run ends at the same step, and copies it.
  const auto deadline = std::chrono::steady_clock::now() + options_.patience;
  MutexLock lock(mu_);
  for (;;) {
    bool waiting = false;
    for (size_t s = 0; s < last_received_.size(); ++s) waiting = waiting || (last_received_[s] < last && receiving_[s]);
    if (!waiting) break;
    if (!received_cv_.wait_until(mu_, deadline) && std::chrono::steady_clock::now() >= deadline) break;
  }
  for (size_t s = 0; s < last_received_.size(); ++s)
    if (last_received_[s] < last)
      spdlog::warn("{}: node {}'s pieces after step {} did not arrive{}", options_.me, options_.from_ranks[s], last,
                   receiving_[s] ? " in time" : "");
}

void Replicator::stop() {
  if (stopping_.exchange(true)) return;
  // Waits for acks and chunks end now, not at their patience.
  options_.transport->cancel_tags(options_.tag_base + kReplicaAckTag, options_.tag_base + kReplicaChunkTag + 1,
                                  "the run ended");
  for (std::thread& receiver : receivers_) receiver.join();
  receivers_.clear();
}

StatusOr<NodeFile> Replicator::send(int64_t step, std::vector<TensorPiece> tensors) {
  std::vector<ctl::Tensor> values, state;
  for (TensorPiece& t : tensors)
    (t.optimizer_state ? state : values)
        .push_back(ctl::Tensor{std::move(t.tensor), std::move(t.logical), std::move(t.offset), std::move(t.shape),
                               std::move(t.values)});
  RILL_ASSIGN_OR_RETURN(std::vector<std::string> messages,
                        pack_tensors(std::move(values), std::move(state), options_.job, options_.phase, step,
                                     options_.most, "a replica of this node's pieces"));
  NodeFile sent;
  for (const std::string& m : messages) sent.bytes += static_cast<int64_t>(m.size());
  const ReplicaStore::Messages held = options_.store->keep_own(options_.job, options_.phase, step, std::move(messages));
  RILL_RETURN_IF_ERROR(send_to_buddies(step, *held));
  return sent;
}

Status Replicator::send_to_buddies(int64_t step, const std::vector<std::string>& messages) {
  // Every buddy at once, the nearest on this thread: a buddy that fails, or
  // hangs without being declared lost (its acks wait out the patience),
  // holds back only its own copy.
  std::vector<Status> sent(options_.to.size());
  auto send_to = [&](size_t i) {
    sent[i] = send_stream(*options_.transport, options_.to[i], replica_tags(options_.tag_base), step, messages,
                          options_.patience);
  };
  std::vector<std::thread> others;
  for (size_t i = 1; i < options_.to.size(); ++i) {
    try {
      others.emplace_back(send_to, i);
    } catch (const std::system_error&) {
      send_to(i);  // no thread to be had: in turn
    }
  }
  if (!sent.empty()) send_to(0);
  for (std::thread& t : others) t.join();
  for (const Status& one : sent)
    if (!one.ok()) return one;  // the nearest's first
  return {};
}

// Whether `header` is within what the node before may send, `bytes` of its
// step's copy taken already: a step of the run, and at most what the
// model's pieces weigh (most_piece_bytes). Checked before a byte of the
// body is taken.
Status Replicator::bounded(const StreamHeader& header, uint64_t bytes) const {
  if (header.step > options_.last_step)
    return data_loss("a copy after step {}, past the run's last step {}", header.step, options_.last_step);
  if (bytes + header.bytes > options_.most_bytes)
    return data_loss("a copy of more than {} bytes, past what the model's pieces weigh ({})", bytes + header.bytes,
                     options_.most_bytes);
  return {};
}

void Replicator::receive_loop(size_t source) {
  const int from = options_.from[source], from_rank = options_.from_ranks[source];
  const StreamTags tags = replica_tags(options_.tag_base);
  std::vector<std::string> held;  // the step under way's messages
  int64_t step = -1;
  uint64_t count = 0, bytes = 0;
  while (!stopping_.load()) {
    auto header = receive_stream_header(*options_.transport, from, tags,
                                        comm::Clock::now() + std::chrono::milliseconds(200), kMostStreamBytes);
    if (!header.ok() && header.status().code() == Code::kDeadlineExceeded) continue;
    Status failed = header.status();
    if (header.ok()) {
      if (header->index == 0) held.clear(), bytes = 0;  // a step's first message starts it afresh
      // A step's messages come in order from its first. One out of turn
      // (the message before it was dropped) within the bounds is read and
      // dropped, so that its sender, waiting for the acks, goes on to its
      // next copy at once.
      const bool in_turn =
          header->index == held.size() && (held.empty() || (header->step == step && header->count == count));
      failed = bounded(*header, in_turn ? bytes : 0);
      if (failed.ok() && header->count > 0) {
        auto body = receive_stream_body(*options_.transport, from, tags, *header, options_.patience);
        failed = body.status();
        if (body.ok() && in_turn) {
          bytes += body->size();
          held.push_back(std::move(*body));
        }
      }
      if (failed.ok() && !in_turn)
        failed = data_loss("message {} of {} after step {} came where message {} of {} after step {} was due",
                           header->index, header->count, header->step, held.size(), count, step);
      if (failed.ok()) step = header->step, count = header->count;
      if (failed.ok() && held.size() == header->count) {
        options_.store->keep_replica(options_.job, options_.phase, from_rank, step, std::move(held));
        held.clear();
        MutexLock lock(mu_);
        // The run's first copy: from here a loss of the node before can go
        // on from memory (an operator, and the tests, can tell when).
        if (last_received_[source] < 0)
          spdlog::info("{}: holds its first copy of node {}'s pieces (after step {}, {} bytes)", options_.me,
                       from_rank, step, bytes);
        bytes = 0;
        last_received_[source] = std::max(last_received_[source], step);
        received_cv_.notify_all();
      }
    }
    if (failed.ok()) continue;
    // The run ended (its tags cancelled), or the node before is gone (the
    // run fails for that, naming it).
    if (stopping_.load() || failed.code() == Code::kAborted || failed.code() == Code::kUnavailable) {
      if (!stopping_.load() && failed.code() == Code::kUnavailable)
        spdlog::info("{}: no more replicas from node {}: {}", options_.me, from_rank, failed.message());
      return;
    }
    // A message that does not add up: that step's copy is dropped, and the
    // next header starts the next (what is left of this one is read and
    // dropped on the way), so its chunks never pile up unread.
    spdlog::warn("{}: a replica from node {} dropped: {}", options_.me, from_rank, failed.message());
    held.clear();
    bytes = 0;
    step = -1;
  }
}

}  // namespace rill
