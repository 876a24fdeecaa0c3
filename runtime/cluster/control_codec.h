// Control-plane messages (runtime/cluster/control.fbs) as plain values, and their
// encoding. Decoding verifies the buffer first: a corrupt or foreign message
// is a kDataLoss Status, never a crash. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "comm/tcp_link.h"
#include "comm/transport.h"
#include "kernels/tensor.h"

namespace rill::control {

inline constexpr const char* kRillVersion = "0.1.0";
// Changes whenever the plan or control schema text changes.
uint64_t schema_hash();

struct Tensor {
  std::string name;
  Shape shape;                  // logical
  std::vector<int64_t> offset;  // of this piece
  Shape piece_shape;            // empty: the whole
  std::vector<float> values;
};

// Session ids (comm/data_cipher.h) as raw bytes: 32 per node, empty without a key.
struct Join {
  int rank = 0;
  std::string version;
  uint64_t schema_hash = 0;
  std::string address, devices;
  std::string data_session;
  std::string machines;  // every node's address, as this agent was given them
};
struct JoinReply {
  bool ok = false;
  std::string error;
  int world = 0;
  std::string data_sessions;
  std::vector<comm::Endpoint> data_endpoints;  // every node's data port now (empty: as listed)
};
struct Submit {
  std::string job_text, file_name;
  bool follow = false;
  std::string devices;
  int64_t steps = 0;
  std::vector<std::string> overrides;
  std::string resume;
  int max_restarts = 0;
  bool trace = false;
  int min_nodes = 0;
  int64_t replica_every = -1;
  int replica_copies = 0;  // 0: 1
};
struct SubmitReply { int64_t job_id = 0; std::string error; int queued_behind = 0; };
struct PlanPart {
  int64_t job_id = 0;
  int phase = 0;
  uint64_t tag_base = 0;
  // The node compiles its own plan from these (compiler::compile).
  std::string job_text;
  std::string devices;
  int mode = 0;  // compiler::Mode
  int64_t steps = 0;
  int activation_register_num = 2;
  std::vector<Tensor> initial_values;
  std::vector<Tensor> initial_state;
  int64_t start_step = 0;
  int64_t snapshot_every = 0;
  bool trace = false;
  std::vector<int> members;  // the plan's nodes as machine-list ranks (empty: all)
  bool keep_steps = false;
  int64_t kept_step = -1;    // >= 0: start from this node's memory at this step
  std::vector<uint64_t> memory_parts;  // node 0's memory follows over the data plane (memory_transfer.h)
  int64_t replica_every = 0;  // > 0: this node's pieces to the next member every this many steps
  int replica_copies = 1;     // to this many next members
};
// One actor's acts on a node (runtime/node/node_runtime.h ActorTraceRecord).
struct ActTrace {
  uint64_t id = 0;
  std::string name;
  int acts_per_step = 1;
  std::string collective;
  std::vector<int64_t> begin_ns, end_ns, done_ns;
};
struct CheckpointPiece {
  std::string tensor;
  Shape shape, offset, piece_shape;
  DType dtype = DType::kF32;
};
struct CheckpointWritten {
  int64_t job_id = 0;
  int phase = 0;
  int64_t steps_done = 0;
  int node = 0;
  std::string file;
  int64_t bytes = 0;
  std::vector<CheckpointPiece> pieces;
  std::string error;
  Code code = Code::kOk;
  double block_seconds = 0, write_seconds = 0;
};
struct PlanAck {
  int64_t job_id = 0;
  int phase = 0;
  int node = 0;
  std::string error;
  Code code = Code::kOk;
  std::vector<CheckpointPiece> carried;  // tensor and offset (runtime/node/carried_state.h)
  int replica_pieces = 0;  // with PlanPart::replica_every: the pieces it copies
};
struct Start { int64_t job_id = 0; int phase = 0; };
struct Done {
  int64_t job_id = 0;
  int phase = 0;
  int node = 0;
  std::string error;
  std::vector<Tensor> variables;
  double seconds = 0;
  std::vector<int64_t> received_from;
  std::vector<int64_t> received_bytes_from;
  Code code = Code::kOk;  // the error's
  std::vector<ActTrace> traces;  // with PlanPart::trace
  int64_t kept_first = -1, kept_last = -1;  // with PlanPart::keep_steps
  bool kept_whole = false;
  std::string comm;  // its flight record at the run's end, as JSON
  std::vector<int64_t> replica_own;  // steps its replica store holds its own pieces at
  struct Replica {
    int source = 0;  // machine-list rank
    std::vector<int64_t> steps;
  };
  std::vector<Replica> replicas;  // other nodes' pieces it holds whole
};
struct Progress { int64_t job_id = 0; std::string line; };
struct Result {
  int64_t job_id = 0;
  std::string result_json, error;
  Code code = Code::kOk;
  std::string trace_json;  // with Submit::trace
};
struct StatusRequest {};
struct StatusReply { std::string status_json; };
struct Heartbeat {
  int node = 0;
  int64_t job_id = -1;  // the job the node runs, its phase, and how far it is (NodePace); -1: none
  int phase = 0;
  double steps = 0;
  double busy_seconds = 0;
  struct Thread {
    std::string name;
    int64_t acts = 0;
    double busy_seconds = 0;
    int64_t queued = 0;
  };
  std::vector<Thread> threads;
  std::vector<int64_t> received_bytes_from;
  std::vector<comm::PeerRate> link_rates;  // its busy data connections' rates
  std::string comm;                        // its flight record, as JSON
  int64_t checkpoint_bytes = 0;            // its checkpoint writers' (from the master: the cluster's)
  int64_t checkpoint_step = -1;            // the step whose file it writes now; -1: none
};
struct Abort { int64_t job_id = 0; int phase = 0; std::string reason; };
struct Shutdown { std::string reason; bool join_again = false; };
struct Rejoined { int node = 0; std::string data_session; comm::Endpoint data_endpoint; };
struct LinkError { int node = 0; std::string reason; };
struct Stop { int64_t job_id = 0; bool now = false; };
struct Hold { int64_t job_id = 0; int phase = 0; };
struct Held { int64_t job_id = 0; int phase = 0; int node = 0; int64_t last_begun = 0; };
struct EndAt { int64_t job_id = 0; int phase = 0; int64_t end = 0; };
struct Gather {
  int64_t job_id = 0;
  int phase = 0;
  uint64_t tag_base = 0;
  int64_t step = 0;
  bool own = true;               // its own pieces too
  std::vector<int> replicas_of;  // machine-list ranks whose replicas it sends too
  double patience_s = 0;         // for each of node 0's acks (0: the agent's stall timeout)
};

using Message = std::variant<Join, JoinReply, Submit, SubmitReply, PlanPart, PlanAck, Start, Done, CheckpointWritten, Progress, Result,
                             StatusRequest, StatusReply, Heartbeat, Abort, Shutdown, Rejoined, LinkError, Stop, Hold,
                             Held, EndAt, Gather>;

// A node's error as the master takes it: its code (one this build does not
// know is kInternal) and its message, named by the node it came from.
Status node_error(Code code, const std::string& node, const std::string& error);

std::string encode(const Message& message);
// The message's type as the schema names it ("PlanAck").
const char* type_name(const Message& message);
StatusOr<Message> decode(std::string_view bytes);

}  // namespace rill::control
