// The agent's outgoing control messages: what threads post, the loop sends
// without blocking, keeping what a full queue refuses; and the parsing of
// the faults tests inject into them (--control-fault,
// runtime/cluster/faulty_control_channel.h).
#include "runtime/cluster/agent.h"
#include "runtime/cluster/agent_impl.h"

#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/printable.h"
#include "runtime/cluster/control_codec.h"

namespace rill::agent_internal {

void Agent::post(Outgoing out) {
  {
    MutexLock lock(out_mu_);
    outbox_.push_back(std::move(out));
  }
  if (channel_) channel_->wake();  // the loop sends it now, not when its wait ends
}

void Agent::send_router(const std::string& identity, const std::string& bytes) {
  deliver(Outgoing{false, identity, bytes});
}

bool Agent::router_send_now(const std::string& identity, const std::string& bytes) {
  const int node = node_of(identity);
  switch (channel_->send_to(identity, bytes)) {
    case ControlChannel::Sent::kSent:
      return true;
    case ControlChannel::Sent::kFull:
      if (node >= 0) return false;  // a node's queue is full: kept
      // A client that reads no answers: counted, logged at most every 10 s.
      ++unread_answers_dropped_;
      if (seconds_since(unread_answers_warned_) >= 10) {
        spdlog::warn("{}: dropped {} answer(s) to clients that do not read them",
                     node_name(options_.machines, options_.rank), unread_answers_dropped_);
        unread_answers_warned_ = now();
        unread_answers_dropped_ = 0;
      }
      return true;
    case ControlChannel::Sent::kUnreachable:
      // Once per node: a peer that left is reported as lost by check_liveness.
      if (node >= 0) {
        if (!unreachable_warned_[node])
          spdlog::warn("control message to {} not delivered: it is not connected", node_name(options_.machines, node));
        unreachable_warned_[node] = true;
      } else {
        spdlog::warn("control message to client '{}' not delivered: it is not connected", printable_name(identity));
      }
      return true;
  }
  return true;
}

void Agent::deliver(Outgoing o) {
  bool held = false;
  for (const Outgoing& h : backlog_) held = held || (h.to_master == o.to_master && h.identity == o.identity);
  if (held || !send_now(o)) backlog_.push_back(std::move(o));
}

void Agent::drop_queued_to_master() {
  {
    MutexLock lock(out_mu_);
    std::erase_if(outbox_, [](const Outgoing& o) { return o.to_master; });
  }
  std::erase_if(backlog_, [](const Outgoing& o) { return o.to_master; });
}

void Agent::flush() {
  std::vector<Outgoing> out;
  {
    MutexLock lock(out_mu_);
    out.swap(outbox_);
  }
  // What a full queue held back goes first, each peer's in order.
  std::deque<Outgoing> held;
  held.swap(backlog_);
  for (Outgoing& o : held) deliver(std::move(o));
  for (Outgoing& o : out) {
    if (o.node >= 0) o.identity = identity_of(o.node);
    deliver(std::move(o));
  }
}

bool Agent::send_now(const Outgoing& o) {
  if (o.bytes.size() > options_.max_message_bytes) {
    // The peer would refuse it and drop the connection.
    spdlog::error("{}: a control message of {} bytes to {} is larger than --max-message-bytes {}: not sent",
                  node_name(options_.machines, options_.rank), o.bytes.size(), o.to_master ? "the master" : "a peer",
                  options_.max_message_bytes);
    return true;
  }
  if (o.to_master) return channel_->send_to_master(o.bytes) != ControlChannel::Sent::kFull;
  return o.identity.empty() || router_send_now(o.identity, o.bytes);
}

}  // namespace rill::agent_internal

namespace rill {

StatusOr<ControlFault> parse_control_fault(const std::string& spec) {
  ControlFault fault;
  if (spec.empty()) return fault;
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  const size_t second = rest.find(':');
  fault.message = rest.substr(0, second);
  using K = ControlFault::Kind;
  static const std::map<std::string, K> kinds = {{"drop", K::kDrop},       {"delay", K::kDelay},
                                                 {"duplicate", K::kDuplicate}, {"corrupt", K::kCorrupt},
                                                 {"reorder", K::kReorder}, {"cut", K::kCut}};
  auto it = kinds.find(kind);
  if (it == kinds.end())
    return invalid_argument("control fault '{}': the kind must be drop, delay, duplicate, corrupt, reorder or cut",
                            spec);
  fault.kind = it->second;
  if (fault.kind == K::kDelay) {
    if (second == std::string::npos) return invalid_argument("control fault '{}': delay:MESSAGE:SECONDS", spec);
    try {
      fault.seconds = std::stod(rest.substr(second + 1));
    } catch (const std::exception&) {
      return invalid_argument("control fault '{}': the delay is not a number of seconds", spec);
    }
  }
  return fault;
}

}  // namespace rill
