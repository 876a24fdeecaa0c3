// The agent's outgoing control messages: what threads post, the loop sends
// without blocking, keeping what a full queue refuses; and the faults tests
// inject into them (--control-fault).
#include "runtime/cluster/agent.h"
#include "runtime/cluster/agent_impl.h"

#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "runtime/cluster/control_codec.h"

namespace rill::agent_internal {

void Agent::post(Outgoing out) {
  MutexLock lock(out_mu_);
  outbox_.push_back(std::move(out));
}

void Agent::post_to_node(int node, const ctl::Message& m) {
  if (node == 0 && !is_master()) post(Outgoing{true, "", ctl::encode(m)});
  else post(Outgoing{false, identity_of_node_[node], ctl::encode(m)});
}

void Agent::send_router(const std::string& identity, const std::string& bytes) {
  deliver(Outgoing{false, identity, bytes});
}

bool Agent::router_send_now(const std::string& identity, const std::string& bytes) {
  try {
    // ZeroMQ takes a message's later frames once it took the first.
    if (!server_.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      for (int r = 0; r < world_; ++r)
        if (identity_of_node_[r] == identity) return false;  // a node's queue is full: kept
      // A client that reads no answers: counted, logged at most every 10 s.
      ++unread_answers_dropped_;
      if (seconds_since(unread_answers_warned_) >= 10) {
        spdlog::warn("{}: dropped {} answer(s) to clients that do not read them",
                     node_name(options_.machines, options_.rank), unread_answers_dropped_);
        unread_answers_warned_ = Clock::now();
        unread_answers_dropped_ = 0;
      }
      return true;
    }
    (void)server_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    // Once per node: a peer that left is reported as lost by check_liveness.
    for (int r = 0; r < world_; ++r)
      if (identity_of_node_[r] == identity) {
        if (!unreachable_warned_[r])
          spdlog::warn("control message to {} not delivered: {}", node_name(options_.machines, r), e.what());
        unreachable_warned_[r] = true;
        return true;
      }
    spdlog::warn("control message to client '{}' not delivered: {}", identity, e.what());
  }
  return true;
}

void Agent::deliver(Outgoing o) {
  bool held = false;
  for (const Outgoing& h : backlog_) held = held || (h.to_master == o.to_master && h.identity == o.identity);
  if (held || !send_now(o)) backlog_.push_back(std::move(o));
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
  if (options_.fault.kind != ControlFault::Kind::kNone) {
    // Delayed messages whose time has come leave first.
    const auto now = Clock::now();
    for (auto it = delayed_.begin(); it != delayed_.end();)
      if (it->first <= now) {
        deliver(std::move(it->second));
        it = delayed_.erase(it);
      } else {
        ++it;
      }
  }
  for (Outgoing& o : out)
    if (options_.fault.kind == ControlFault::Kind::kNone || inject_fault(o)) deliver(std::move(o));
}

bool Agent::send_now(const Outgoing& o) {
  if (o.bytes.size() > options_.max_message_bytes) {
    // The peer would refuse it and drop the connection.
    spdlog::error("{}: a control message of {} bytes to {} is larger than --max-message-bytes {}: not sent",
                  node_name(options_.machines, options_.rank), o.bytes.size(), o.to_master ? "the master" : "a peer",
                  options_.max_message_bytes);
    return true;
  }
  if (o.to_master) return master_.send(zmq::buffer(o.bytes), zmq::send_flags::dontwait).has_value();
  return o.identity.empty() || router_send_now(o.identity, o.bytes);
}

// Applies options_.fault to a message on its way out; false when it is not
// to be sent now (dropped, held, or the link is cut).
bool Agent::inject_fault(Outgoing& o) {
  const ControlFault& fault = options_.fault;
  if (link_cut_) return false;
  if (held_ && held_->to_master == o.to_master && held_->identity == o.identity) {
    deliver(o);  // the message after the held one goes first
    deliver(std::move(*held_));
    held_.reset();
    return false;
  }
  if (fault_fired_) return true;
  if (!fault.message.empty()) {
    auto decoded = ctl::decode(o.bytes);
    if (!decoded.ok() || fault.message != ctl::type_name(*decoded)) return true;
  }
  fault_fired_ = true;
  const std::string to = o.to_master ? std::string("the master") : "'" + o.identity + "'";
  spdlog::warn("{}: injecting a control-plane fault on a message to {}", node_name(options_.machines, options_.rank), to);
  switch (fault.kind) {
    case ControlFault::Kind::kDrop: return false;
    case ControlFault::Kind::kDelay: delayed_.emplace_back(after(fault.seconds), o); return false;
    case ControlFault::Kind::kDuplicate: deliver(o); return true;
    case ControlFault::Kind::kCorrupt: o.bytes[o.bytes.size() / 2] ^= 0x5a; return true;
    case ControlFault::Kind::kReorder: held_ = o; return false;
    case ControlFault::Kind::kCut: link_cut_ = true; return false;
    case ControlFault::Kind::kNone: break;
  }
  return true;
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
