// The per-node daemon. Every machine runs one agent, started with the machine
// list and its rank; node 0 is the master. Agents join the master (version and
// schema checked, with a deadline), then serve jobs until told to shut down.
// The master accepts jobs from clients (queued, one runs at a time), sends
// every node the job and its compile options, and each node compiles its own
// part of the plan (the master node 0's); the master starts all nodes
// together after every node has built its actors, and gathers the result.
// After the start, actors talk peer to peer over the data plane.
//
// run_agent() blocks on the calling thread; it owns its sockets.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/cluster/cluster_config.h"

namespace rill {
namespace comm {
struct ClusterKey;
class Transport;
}
class ControlChannel;

// A fault this agent injects into the control messages it sends (tests of
// the control plane): the first message of type `message` ("PlanAck"; empty:
// any) is dropped, delayed by `seconds`, sent twice, corrupted (one byte
// flipped), sent after the next message to the same peer (reordered), or is
// the first of all that are never sent again (the link is cut).
struct ControlFault {
  enum class Kind { kNone, kDrop, kDelay, kDuplicate, kCorrupt, kReorder, kCut };
  Kind kind = Kind::kNone;
  std::string message;
  double seconds = 0;
};
// "drop:PlanAck", "delay:Done:2", "cut:" ...
StatusOr<ControlFault> parse_control_fault(const std::string& spec);

// The time an agent goes by: when it sends heartbeats, when a silent peer
// is lost, the join deadline, and how long the master waits for the nodes'
// acks and ends of a phase. Steady time, unless a test gives its own to let
// time pass without waiting (a clock that stops holds those waits; the
// runtime's own stall timeout is always steady time).
class AgentClock {
 public:
  virtual ~AgentClock() = default;
  virtual std::chrono::steady_clock::time_point now() const = 0;
};

struct AgentOptions {
  std::vector<Machine> machines;  // node 0 is the master
  int rank = 0;
  // Where this agent listens when not at its entry of the machine list: an
  // agent taking a lost node's place at another address (`rill agent
  // --address`). Its data port is its control port + 1, as listed ones'.
  // Empty address: as listed.
  Machine at;
  const Machine& own_machine() const { return at.address.empty() ? machines[rank] : at; }
  // Away from its listed address: its peers reach it where it says it is.
  bool away() const { return !at.address.empty() && !(at == machines[rank]); }
  std::string devices = "cpu:1";  // this node's devices (equal on every node)
  double join_timeout_s = 60.0;   // the cluster must form within this
  double heartbeat_s = 1.0;       // agents and master exchange heartbeats
  double dead_after_s = 10.0;     // a node silent this long is lost
  // The data plane closes a connection that carried nothing (not even its
  // pings) this long: ZeroMQ's heartbeat timeout. A connection that closes
  // while its peer's heartbeats still came is a process gone; one that
  // times out is a silent link, whose far side may be up (its node joins
  // again once the link is back).
  double link_timeout_s = 20.0;
  double stall_timeout_s = 60.0;  // a job where no actor acts this long is stopped
  std::FILE* out = stdout;        // progress lines (the master's)
  // The version this agent announces when it joins; tests set another to
  // check that mismatched peers are refused.
  std::string version = "";       // empty: this build's version
  ControlFault fault;             // tests only
  int control_send_hwm = 0;       // tests only: ZeroMQ's send high-water mark on control sockets (0: its default)
  // Tests only: this agent's checkpoint writes take this much longer (a slow
  // disk), the delay spread over each file's chunks (checkpoint_collector.h).
  double checkpoint_write_delay_s = 0;
  // Tests only: the master's job thread calls it as each phase of a job
  // begins, before the phase's nodes are looked at (a node that comes back
  // while an attempt compiles).
  std::function<void(int64_t job, int phase)> before_phase;
  // The master's HTTP endpoint (/metrics, /api/status, /api/jobs/ID):
  // "ADDRESS:PORT", or "off". Empty: kDefaultHttp, and a port in use there
  // only costs a warning.
  std::string http;
  // The master writes each job's metrics here as job-ID.jsonl (empty: not).
  std::string metrics_dir;
  // The cluster key (comm/cluster_key.h): with it, every control and data
  // connection is CurveZMQ and only the cluster's nodes and clients get in.
  // Without it an agent listens only on loopback addresses, unless
  // `insecure` (anyone who reaches its ports can then run jobs on it).
  std::shared_ptr<const comm::ClusterKey> key;
  bool insecure = false;
  // The folders a submitted job may read data from and write checkpoints
  // to (runtime/cluster/allowed_roots.h; empty: the defaults).
  std::vector<std::string> data_roots, checkpoint_roots;
  // The largest message this agent takes on its control and data ports
  // (ZeroMQ refuses a larger one before storing it and drops the
  // connection) and sends: a run whose cross-node regst is larger, or whose
  // node's variables are, fails naming it.
  size_t max_message_bytes = size_t{1} << 30;
  // Tests: the control channel and the data plane to use instead of
  // ZeroMQ's (agents of one process: runtime/cluster/
  // inproc_control_channel.h, comm::make_inproc_transports).
  std::function<std::unique_ptr<ControlChannel>()> control_channel;
  std::function<std::unique_ptr<comm::Transport>()> data_transport;
  std::shared_ptr<const AgentClock> clock;  // null: steady time
};

inline constexpr const char* kDefaultHttp = "127.0.0.1:8265";

// Runs the agent until a Shutdown; returns the first fatal error (a failed
// join, a port in use, a lost master).
Status run_agent(const AgentOptions& options);

}  // namespace rill
