#include "runtime/cluster/faulty_control_channel.h"

#include <spdlog/spdlog.h>

#include "runtime/cluster/control_codec.h"

namespace rill {

FaultyControlChannel::FaultyControlChannel(std::unique_ptr<ControlChannel> inner, ControlFault fault, std::string who)
    : inner_(std::move(inner)), fault_(std::move(fault)), who_(std::move(who)) {}

bool FaultyControlChannel::receive(std::chrono::milliseconds timeout, Incoming* out) {
  send_due();
  // A delayed message leaves on time: the wait ends when it is due.
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [due, message] : delayed_)
    timeout = std::min(timeout, std::chrono::ceil<std::chrono::milliseconds>(std::max(due - now, now - now)));
  return inner_->receive(timeout, out);
}

ControlChannel::Sent FaultyControlChannel::pass(const Message& m) {
  return m.to_master ? inner_->send_to_master(m.bytes) : inner_->send_to(m.identity, m.bytes);
}

// Delayed messages whose time has come leave (a full queue drops them:
// they stand for messages lost late).
void FaultyControlChannel::send_due() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = delayed_.begin(); it != delayed_.end();) {
    if (it->first > now) {
      ++it;
      continue;
    }
    (void)pass(it->second);
    it = delayed_.erase(it);
  }
}

ControlChannel::Sent FaultyControlChannel::send(Message m) {
  send_due();
  if (cut_) return Sent::kSent;  // never leaves: the link is cut
  if (held_ && held_->to_master == m.to_master && held_->identity == m.identity) {
    const Sent sent = pass(m);  // the message after the held one goes first
    if (sent != Sent::kSent) return sent;
    if (pass(*held_) != Sent::kFull) held_.reset();  // a full queue: it goes after the next one
    return Sent::kSent;
  }
  if (fired_ || fault_.kind == ControlFault::Kind::kNone) return pass(m);
  if (!fault_.message.empty()) {
    auto decoded = control::decode(m.bytes);
    if (!decoded.ok() || fault_.message != control::type_name(*decoded)) return pass(m);
  }
  fired_ = true;
  spdlog::warn("{}: injecting a control-plane fault on a message to {}", who_,
               m.to_master ? std::string("the master") : "'" + m.identity + "'");
  switch (fault_.kind) {
    case ControlFault::Kind::kDrop:
      return Sent::kSent;
    case ControlFault::Kind::kDelay:
      delayed_.emplace_back(std::chrono::steady_clock::now() +
                                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(fault_.seconds)),
                            std::move(m));
      return Sent::kSent;
    case ControlFault::Kind::kDuplicate:
      (void)pass(m);
      return pass(m);
    case ControlFault::Kind::kCorrupt:
      m.bytes[m.bytes.size() / 2] ^= 0x5a;
      return pass(m);
    case ControlFault::Kind::kReorder:
      held_ = std::move(m);
      return Sent::kSent;
    case ControlFault::Kind::kCut:
      cut_ = true;
      return Sent::kSent;
    case ControlFault::Kind::kNone:
      break;
  }
  return pass(m);
}

}  // namespace rill
