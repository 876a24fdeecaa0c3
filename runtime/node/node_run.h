// NodeRun: NodeRuntime's implementation, one node's part of a plan built into
// actors, regst memory and worker threads, and run. Its parts, by concept:
//   node_runtime.cc  building the actors and workers; running; failing
//   node_memory.cc   regst slots in host, page-locked and device memory; GPU contexts
//   node_bodies.cc   what each task does (its body); variables' start and end
//   node_bus.cc      messages between threads and nodes (the cross-node wire)
// Internal to runtime/node/; threads as node_runtime.h says.
#pragma once

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "base/actor_id.h"
#include "base/mutex.h"
#include "comm/transport.h"
#include "compiler/memory_plan.h"
#include "compiler/plan_generated.h"
#include "kernels/cuda/cuda_context.h"
#include "comm/flight_record.h"
#include "runtime/node/boxing_setup.h"
#include "runtime/node/carried_state.h"
#include "runtime/node/node_runtime.h"
#include "runtime/node/worker.h"

namespace rill {
// Room for a control message's own fields beside the tensors it carries.
constexpr size_t kControlHeadroom = size_t{64} << 10;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// Page-locked host memory, released through the context that made it.
struct HostFree {
  CudaContext* cuda = nullptr;
  void operator()(void* p) const {
    if (cuda) cuda->release_host(p);
  }
};

// What a variable task's piece is a piece of: its own variable, or, for a
// block on a parameter server, the variable the block was cut from (so it
// is initialized, restored, saved and reported as those rows of it).
struct PieceOf {
  std::string name;
  Shape logical;
  Shape offset;
};
PieceOf piece_of_variable(const plan::Task& task, const plan::RegstDesc& model);

// Everything one node builds from its part of the plan.
class NodeRun : public NodeRuntime {
 public:
  NodeRun(std::string bytes, RunOptions options)
      : bytes_(std::move(bytes)),
        options_(std::move(options)),
        record_(options_.transport ? options_.transport->world() : 0),
        boxing_(options_.transport, options_.stall_timeout_s, options_.tag_base, &record_, options_.liveness) {}
  ~NodeRun() override;
  Status build();
  RunReport run() override;
  void abort(const Status& reason) override { fail(reason); }
  int64_t hold() override;
  void end_at(int64_t end) override;
  NodePace pace() const override {
    NodePace pace;
    if (acts_per_step_ > 0) pace.steps = static_cast<double>(progress_.load()) / static_cast<double>(acts_per_step_);
    if (device_threads_ > 0) pace.busy_seconds = static_cast<double>(busy_ns_.load()) * 1e-9 / device_threads_;
    for (const auto& worker : workers_) {
      const uint64_t id = worker->thread_key() << ActorId::kStreamShift;
      pace.threads.push_back({fmt::format("{}{}.{}", device_type_name(ActorId::device_type(id)), ActorId::device(id),
                                          ActorId::stream(id)),
                              worker->acts(), static_cast<double>(worker->busy_ns()) * 1e-9, worker->queue_depth()});
    }
    pace.comm = record_.json(16).dump();
    return pace;
  }

 private:
  const plan::RegstDesc* regst(int64_t id) const;
  void route(const ActorMsg& msg);
  void receive(int from, const comm::MessageView& message);
  Status allocate_regsts();
  Status check_fits(const compiler::MemoryPlan& memory);
  StatusOr<Body> make_body(const plan::Task& task);
  StatusOr<std::shared_ptr<const Dataset>> dataset(int index);
  Status init_variable(const plan::Task& task, Actor& actor);
  // Its body's part: a VariableBody or a LanedVariableBody.
  template <typename VariableLike>
  Status init_variable(const plan::Task& task, VariableLike& body);
  // A boxing's carried state (a compressed all-reduce's): restored from
  // options_.initial_state, and into checkpoints (runtime/node/carried_state.h).
  Status init_boxing(const plan::Task& task, Actor& actor);
  void snapshot_carried(const std::vector<CarriedPiece>& pieces, int64_t steps_done,
                        const BoxingBody::Carried& carried);
  // The context of the GPU a task runs on, made on first use.
  StatusOr<CudaContext*> cuda_for(uint32_t device);
  void collect_variables(RunReport& report);
  void fail(const Status& status);

  std::string bytes_;
  RunOptions options_;
  const plan::Plan* plan_ = nullptr;
  std::unordered_map<int64_t, const plan::RegstDesc*> regst_by_id_;
  // By device index; outlives what is below (the device collectives' ranks
  // and their scratch included).
  std::map<uint32_t, std::unique_ptr<CudaContext>> cuda_;
  comm::FlightRecord record_;  // this node's communication, as it goes (comm/flight_record.h)
  BoxingSetup boxing_;  // owns the boxings' collectives: declared before the actors using them
  std::vector<std::unique_ptr<void, FreeDeleter>> memory_;
  comm::SendTracker sends_;  // slots handed to the transport without a copy
  std::vector<DeviceBuffer> device_memory_;
  std::vector<std::unique_ptr<void, HostFree>> pinned_memory_;
  std::unordered_map<int64_t, std::vector<TensorView>> slots_;  // by regst id: one view per slot
  // By variable task id: its optimizer state tensors, in the plan's blocks (zeroed).
  std::unordered_map<uint64_t, std::vector<std::byte*>> state_memory_;
  // By boxing task id: its scratch in the plan's host block; by compute
  // task id, its thread's compute scratch there.
  std::unordered_map<uint64_t, std::byte*> boxing_memory_;
  std::unordered_map<uint64_t, std::span<std::byte>> compute_memory_;
  std::vector<std::shared_ptr<const Dataset>> datasets_;
  // (dataset, field, bound) already checked by a source (SourceConf.index_bounds).
  std::set<std::tuple<int, int, int64_t>> checked_bounds_;
  std::unique_ptr<RunEnd> end_;  // the actors' end: made before them
  std::vector<std::unique_ptr<Actor>> actors_;
  std::vector<Actor*> by_index_;
  std::vector<const plan::Task*> variable_tasks_;
  // The boxings whose carried state goes into checkpoints, with its pieces.
  std::vector<std::pair<const BoxingBody*, std::vector<CarriedPiece>>> carried_;
  size_t variable_bytes_ = 0;  // of this node's distinct variable pieces
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unordered_map<uint64_t, Worker*> worker_by_key_;
  std::atomic<int64_t> progress_{0};
  std::atomic<int64_t> busy_ns_{0};  // the device threads' acting time
  int64_t acts_per_step_ = 0;        // over every actor of the node
  int device_threads_ = 0;
  Mutex error_mu_;
  Status first_error_ GUARDED_BY(error_mu_);
  std::atomic<bool> failed_{false};
  std::atomic<int64_t> received_bytes_copied_{0};  // into mirror slots
  std::atomic<int64_t> received_zero_row_readies_{0};
  // Per other node: the numbers of the messages sent to it (under mu, with
  // the send) and of the last one received from it (the transport's receive
  // thread, or under the sender's mu on an in-process transport).
  struct Link {
    Mutex mu;
    uint64_t sent GUARDED_BY(mu) = 0;
    std::atomic<uint64_t> received{0};
  };
  std::vector<std::unique_ptr<Link>> links_;
};

}  // namespace rill
