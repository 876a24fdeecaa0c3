// NodeRuntime: runs one node's part of a plan. It builds actors, regst memory
// and worker threads from the plan's bytes alone (verified first), exactly as
// a remote node does, starts every worker, and waits until every actor has
// retired, an actor fails, or nothing has acted for `stall_timeout_s` (then
// the error names each waiting actor and what it waits for).
//
// run_plan() is called from one thread; the step listener is called on the
// sink's thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "actor/actor.h"
#include "base/file_access.h"
#include "base/status.h"
#include "comm/liveness.h"

namespace rill {

struct VariableValue {
  Shape shape;
  std::vector<float> values;  // the logical tensor, assembled from its pieces
};

namespace comm {
class Transport;
}
class StepKeeper;

// One node's piece of a variable (the whole tensor for a broadcast one).
struct VariablePiece {
  std::string name;
  Shape logical_shape;
  std::vector<int64_t> offset;
  Shape shape;
  std::vector<float> values;
  // Optimizer state of this piece, named as checkpoints store it ("momentum").
  std::vector<std::pair<std::string, std::vector<float>>> state;
  double copy_seconds = 0;  // a snapshot: how long taking these copies held the variable's thread
};

// A piece a node's plan writes into checkpoints (its variables marked
// checkpoint_writer: one holder of each distinct piece over the cluster).
struct SnapshotPiece {
  std::string name;
  std::vector<int64_t> offset;
};
// The pieces `node_plan` (one node's plan) tells on_snapshot of.
StatusOr<std::vector<SnapshotPiece>> snapshot_pieces(std::string_view node_plan);

// The tags one run may use over the transport: [tag_base, tag_base + kTagsPerRun).
inline constexpr uint64_t kTagsPerRun = uint64_t{1} << 20;
// Where the tags of phase `phase` of job `job` begin: a range of its own for
// every (job, phase) there can be (jobs below 2^24, phases below 2^20 each:
// a job restarted a million times is refused), so no run ever reuses the
// range of a run that may still be draining.
inline constexpr int kJobBits = 24, kPhaseBits = 20;
inline StatusOr<uint64_t> run_tag_base(int64_t job, int phase) {
  if (job < 0 || job >= (int64_t{1} << kJobBits) || phase < 0 || phase >= (1 << kPhaseBits))
    return Status(Code::kFailedPrecondition,
                  fmt::format("job {} phase {} has no tags of its own left (at most {} jobs of {} phases each)", job,
                              phase, int64_t{1} << kJobBits, 1 << kPhaseBits));
  static_assert(kJobBits + kPhaseBits + 20 == 64 && kTagsPerRun == uint64_t{1} << 20);
  return (static_cast<uint64_t>(job) << (kPhaseBits + 20)) | (static_cast<uint64_t>(phase) << 20);
}

struct RunOptions {
  int node = 0;                     // which node's tasks to run
  // Where the plan's dataset files may lie (an agent's data roots), checked
  // as each is opened (base/file_access.h); by default anywhere.
  FileAccess data_access;
  // The data plane among nodes (null on one node): actor messages for other
  // nodes and the collectives of cross-node boxing travel over it, tagged
  // with `tag_base` + channel so that successive jobs never mix.
  comm::Transport* transport = nullptr;
  uint64_t tag_base = 0;
  double stall_timeout_s = 60.0;    // stop and report when no actor acts this long
  // Grows while work the run may wait for goes on outside its actors: a
  // checkpoint being written on this node or another (write_progress.h).
  // While it changes, no act is not a stall, and a collective waiting for a
  // peer waits on. Null: acts alone count. `describe_liveness` says what
  // that work is, for a stall's error ("" when none).
  comm::Liveness liveness;
  std::function<std::string()> describe_liveness;
  // Called when the run stops on a failure or a stall, before it joins its
  // workers (perhaps more than once, from any thread): what holds a worker
  // outside the run lets go (a snapshot waiting for room among the
  // checkpoints: CheckpointCollector::abandon).
  std::function<void()> on_abort;
  bool trace = false;               // record per-act timestamps
  // Start variables from these logical values instead of their initializers,
  // and their optimizer state from `initial_state` ("w1/momentum" -> values).
  std::map<std::string, std::vector<float>> initial_values;
  std::map<std::string, std::vector<float>> initial_state;
  // A checkpoint's carried state of compressed all-reduces, every node's,
  // as read (runtime/node/carried_state.h): the master gives each node its
  // own part of it (carried_for_node) into initial_state. Not read by a node.
  std::map<std::string, std::pair<Shape, std::vector<float>>> carried_checkpoint;
  // The first step to run (a resumed job): sources read on from there and
  // the run covers steps start_step .. plan steps - 1.
  int64_t start_step = 0;
  // Told every piece this node writes into checkpoints (snapshot_pieces)
  // after each `snapshot_every`-th step and after the last one, on the
  // variable's thread: a copy taken at the step boundary.
  int64_t snapshot_every = 0;
  std::function<void(int64_t steps_done, VariablePiece piece)> on_snapshot;
  // The same pieces (variables only) after each `replica_every`-th step
  // (> 0) and the run's last, as copies for another node's memory
  // (runtime/cluster/replicator.h).
  int64_t replica_every = 0;
  std::function<void(int64_t steps_done, VariablePiece piece)> on_replica;
  // Messages of another stream on the run's tags (the replicas' chunks):
  // the largest, and how many bytes of them may wait unread, beside what
  // the plan's own messages need (the bounds the run sets on its transport).
  size_t side_message_bytes = 0;
  size_t side_unread_bytes = 0;
  // Where every variable piece goes after each step (and as the run starts),
  // kept in memory for a job that goes on without a lost node
  // (runtime/node/step_keeper.h); null: nothing kept. It must outlive the run.
  StepKeeper* keeper = nullptr;
  // >= 0: every variable piece and its optimizer state start from `keeper`'s
  // piece as it stood after this many steps of job `keeper_job` (a run of
  // the plan the node ran before, on the same nodes, whose pieces are not
  // whole); a piece it does not hold fails the build, naming it.
  int64_t start_from_kept = -1;
  int64_t keeper_job = -1;
  // The largest control message this node may send to the master (0: none is
  // sent, the master's own run). Its variables go back in one (after the run).
  size_t max_control_message_bytes = 0;
  SinkBody::Listener on_step;       // per-step loss and metrics (sink's thread)
  // A stop asked for (an interrupted job): when it turns true, a node running
  // alone (no transport) ends after the steps it has begun, as if the plan
  // ended there (its last snapshot included). Across nodes it is not read:
  // the master agrees the step with every node through hold() and end_at().
  const std::atomic<bool>* stop = nullptr;
  // Fault injection for tests: drops each message between threads for which
  // it returns true (a lost message must end in a stuck-job report).
  std::function<bool(const ActorMsg&)> drop_message;
};

struct ActorTraceRecord {
  uint64_t id = 0;
  std::string name;
  ActTrace trace;  // per act: act i is step i / acts_per_step, micro-batch i % acts_per_step
  int acts_per_step = 1;
  std::string collective;  // boxing across nodes: what its last act called ("all_reduce ring"); a device
                           // collective: its call and backend ("all_reduce nccl", "all_gather staged")
};

struct RunReport {
  Status status;
  int64_t steps = 0;                // where the run ended: the plan's steps, or fewer when stopped
  bool whole_plan = false;          // it ran steps to the plan's end, none cut off by a stop
  double seconds = 0.0;             // from the first act to the last retirement
  std::map<std::string, VariableValue> variables;  // this node's pieces assembled
  std::vector<VariablePiece> pieces;               // this node's pieces, one per variable
  std::vector<ActorTraceRecord> traces;  // when RunOptions::trace
  // traffic[i][j]: data-plane messages node j received from node i (multi-node runs).
  std::vector<std::vector<int64_t>> traffic;
  std::vector<std::vector<int64_t>> traffic_bytes;  // the same messages' bytes
  // The node's flight record at the run's end (NodePace::comm): after a
  // failure, what each collective was waiting for.
  std::string comm_record;
  // The cluster's master: bytes of the control messages the other nodes sent
  // it while the phase ran (heartbeats, acks, checkpoint reports, their Done).
  int64_t control_bytes_from_nodes = 0;
  // Bytes of other nodes' regsts this node copied in user space: each slot
  // readied to it is copied once, from the transport's buffer into the
  // mirror slot its consumers read (the sender copies nothing). A slot that
  // came with its zero rows left out counts the bytes that came.
  int64_t received_bytes_copied = 0;
  int64_t received_zero_row_readies = 0;  // readies whose slot came with zero rows left out
  // Waits for a whole GPU stream while the workers ran (any thread of the
  // process: a checkpoint's read of a variable on a GPU is one); a run's
  // steady state makes none.
  int64_t device_synchronizes = 0;
};

// How far a running node has come, and how hard its devices work for it
// (the master's straggler report, runtime/cluster/agent.cc).
struct NodePace {
  double steps = 0;  // acts done / acts per step, over every actor of the node
  // Time the node's device threads spent acting (computing; not waiting for
  // a message or a collective), summed over them, divided by their number.
  double busy_seconds = 0;
  // Each thread of the node (devices and comm threads): "cpu0.0", its acts
  // so far and the time it spent acting.
  struct Thread {
    std::string name;
    int64_t acts = 0;
    double busy_seconds = 0;
    int64_t queued = 0;  // messages from other threads waiting for it, now
  };
  std::vector<Thread> threads;
  // The node's flight record (comm/flight_record.h) as JSON: each caller of
  // collectives' call in flight and what it waits for, each link's actor
  // messages, the last events.
  std::string comm;
};

// One node's part of a plan, built and ready to start. build() verifies the
// bytes and allocates everything; run() starts the workers and returns when
// the node is done; abort() and pace() may be called from any thread while
// run() runs.
class NodeRuntime {
 public:
  static StatusOr<std::unique_ptr<NodeRuntime>> build(std::string plan_bytes, RunOptions options);
  virtual ~NodeRuntime() = default;
  virtual RunReport run() = 0;
  virtual void abort(const Status& reason) = 0;
  virtual NodePace pace() const = 0;
  // Ending early at a step every node agrees on (actor/run_end.h): hold()
  // stops sources and variables from beginning steps and returns the last
  // step begun here; end_at(E) lets them run on to E (never past the plan's
  // end), and the run ends there. Any thread, before or while run() runs.
  virtual int64_t hold() = 0;
  virtual void end_at(int64_t end) = 0;
};

// build() then run() on one node.
RunReport run_plan(std::string_view plan_bytes, const RunOptions& options);

}  // namespace rill
