// A control channel that injects one fault into what its agent sends (the
// agent's --control-fault, for tests of the control plane): the first
// message of a type (runtime/cluster/agent.h ControlFault) is dropped,
// delayed, sent twice, corrupted, sent after the next message to the same
// peer, or is the first of all that are never sent again (the link is cut).
// What comes in passes through.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cluster/agent.h"
#include "runtime/cluster/control_channel.h"

namespace rill {

class FaultyControlChannel final : public ControlChannel {
 public:
  // `who`: the agent, for the warning that says the fault fired.
  FaultyControlChannel(std::unique_ptr<ControlChannel> inner, ControlFault fault, std::string who);

  bool receive(std::chrono::milliseconds timeout, Incoming* out) override;
  Sent send_to_master(const std::string& bytes) override { return send({true, "", bytes}); }
  Sent send_to(const std::string& identity, const std::string& bytes) override {
    return send({false, identity, bytes});
  }
  std::string master_failure() override { return inner_->master_failure(); }
  void wake() override { inner_->wake(); }
  void reconnect_master() override { inner_->reconnect_master(); }
  bool master_closed(std::chrono::milliseconds grace) override { return inner_->master_closed(grace); }

 private:
  struct Message {
    bool to_master = false;
    std::string identity;
    std::string bytes;
  };
  Sent send(Message m);
  Sent pass(const Message& m);
  void send_due();

  std::unique_ptr<ControlChannel> inner_;
  const ControlFault fault_;
  const std::string who_;
  bool fired_ = false;
  bool cut_ = false;
  std::optional<Message> held_;  // reordered: goes after the next message to its peer
  std::vector<std::pair<std::chrono::steady_clock::time_point, Message>> delayed_;
};

}  // namespace rill
