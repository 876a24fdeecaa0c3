// The control channel over ZeroMQ (runtime/cluster/control_channel.h): the
// agent's control port is a ROUTER bound at its machine's ctrl_port; a
// non-master agent has a DEALER to the master's, whose routing identity is
// "node-R." and random digits (comm::node_routing_id: no peer can hold it
// first). With a cluster key both are CurveZMQ, a ZAP handler names each
// peer, and a message whose routing identity is not what its key says is
// dropped (a client cannot speak as a node).
//
// What a peer that holds no key can hold of the port: a connection that
// has not finished its handshake within handshake_interval is dropped, and
// those that may still be in it are bounded per source address and in all
// (comm/connection_guard.h; the oldest is cut), so a flood of idle or slow
// connections from other addresses never keeps a key holder out.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "base/status.h"
#include "runtime/cluster/cluster_config.h"
#include "runtime/cluster/control_channel.h"

namespace rill {
namespace comm {
struct ClusterKey;
}

struct ZmqControlOptions {
  std::vector<Machine> machines;  // node 0 is the master
  int rank = 0;
  std::shared_ptr<const comm::ClusterKey> key;  // null: no CurveZMQ
  size_t max_message_bytes = size_t{1} << 30;   // larger frames drop the connection before they are stored
  int send_hwm = 0;                             // ZeroMQ's send high-water mark (0: its default)
  std::chrono::milliseconds handshake_interval{3000};  // the port's ZMQ_HANDSHAKE_IVL
};

// Binds the control port (an error naming it when it is in use) and, on a
// non-master, connects to the master's.
StatusOr<std::unique_ptr<ControlChannel>> make_zmq_control_channel(const ZmqControlOptions& options);

}  // namespace rill
