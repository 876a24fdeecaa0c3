// Rendezvous: how the processes of a run find each other's data endpoints
// knowing only the master's address, as torch.distributed's env:// does.
// Rank 0 listens on the master endpoint (a ZeroMQ ROUTER); every other rank
// connects and says its rank, the world size it expects and its data port;
// once all have come, rank 0 answers each with every rank's endpoint: the
// host its message came from as rank 0 saw it (rank 0's own: the master's
// host), and its port. A world size that differs, a rank out of range or
// twice, another build's version, or ranks missing at the deadline are
// errors naming the rank, on rank 0 and on every rank it can answer.
//
// connect_world does the rendezvous and builds the ZeroMQ transport and
// collectives over it: rank r's data port is the master's port + 1 + r (a
// world of one gets an in-process transport, no sockets).
// Messages are FlatBuffers (comm/rendezvous.fbs). Blocking; any thread.
//
// Each rank's hello carries its data-plane session id, and the answer every
// rank's: the transport names its shared-memory inbox after it, and with a
// key derives its links' keys from it (comm/data_cipher.h).
// With a cluster key (connect_world: the file $RILL_KEY_FILE names, which
// `rill launch --key` sets) the rendezvous and the transport are CurveZMQ:
// rank r is "node-r", a hello must come from the rank it names, and a
// process without the key is refused at the handshake, so the ids are
// learnt over CURVE.
#pragma once

#include <memory>
#include <vector>

#include "comm/collectives.h"
#include "comm/transport.h"

namespace rill::comm {

inline constexpr uint32_t kRendezvousVersion = 1;

// `session`: this rank's session id; `sessions` (if given) receives every
// rank's, by rank.
StatusOr<std::vector<Endpoint>> rendezvous(int rank, int world, const Endpoint& master, int data_port,
                                           Clock::time_point deadline, const ClusterKey* key = nullptr,
                                           const SessionId& session = {}, std::vector<SessionId>* sessions = nullptr);

// A process's collectives among the ranks of its run. More objects over
// `transport` (an AsyncCollectives, a Collectives over a GroupTransport) may
// run beside `collectives` with tags of their own.
struct Communicator {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Collectives> collectives;
};

// `machines`: each rank's machine, as its launcher laid them out
// (CollectiveOptions::machines); empty: ranks of one address, as the
// rendezvous sees them, are one machine's.
StatusOr<Communicator> connect_world(int rank, int world, const Endpoint& master,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(60),
                                     std::vector<int> machines = {});

}  // namespace rill::comm
