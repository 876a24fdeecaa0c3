// ControlChannel: an agent's control-plane links, as comm::Transport is its
// data plane's. Every agent has a port that nodes and clients send to
// (named by their routing identity: "node-R" for the agent of rank R); a
// non-master agent also has a link up to the master. Messages are control
// messages' bytes (runtime/cluster/control_codec.h); the channel neither
// reads nor orders them beyond keeping each link's order.
//
// Implementations: ZeroMQ (make_zmq_control_channel: a ROUTER port, a
// DEALER to the master, CurveZMQ with a key), in-process (InprocControlHub:
// agents of one process, for tests that check message handling without
// processes), and a fault-injecting decorator (FaultyControlChannel).
// A channel is used by one thread (the agent's loop).
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace rill {

class ControlChannel {
 public:
  virtual ~ControlChannel() = default;

  struct Incoming {
    bool from_master = false;  // on the link up to the master; else on the port
    std::string identity;      // the sender's routing identity (port messages)
    std::string bytes;
  };
  // Waits up to `timeout` for one message. False when none came, or what
  // came was dropped (malformed, or not authenticated as who it claims), or
  // wake() was called.
  virtual bool receive(std::chrono::milliseconds timeout, Incoming* out) = 0;
  // Ends the receive() waiting now, or the next one, at once: another thread
  // has posted work for the loop (a message to send). Any thread.
  virtual void wake() = 0;

  enum class Sent {
    kSent,
    kFull,         // the peer's queue is full: nothing was sent, try again later
    kUnreachable,  // no such peer (gone, or never connected): dropped
  };
  // Sends without waiting.
  virtual Sent send_to_master(const std::string& bytes) = 0;
  virtual Sent send_to(const std::string& identity, const std::string& bytes) = 0;

  // Why the link up to the master failed its handshake ("" while it has
  // not): a node with another key, or none, cannot join.
  virtual std::string master_failure() = 0;

  // Drops the link up to the master, with what it still held unsent, and
  // opens a new one under a new routing identity: for a node that lost its
  // master to a silent link and joins again (what was queued for the old
  // link is stale, and the master takes the new identity as the node's).
  virtual void reconnect_master() {}

  // Whether the link up to the master, once through its handshake, closed
  // and has not come back for `grace`: the master's port refuses, its
  // process is gone. A silent link never counts (heartbeats find it).
  // Channels that cannot tell say false.
  virtual bool master_closed(std::chrono::milliseconds grace) {
    (void)grace;
    return false;
  }
};

}  // namespace rill
