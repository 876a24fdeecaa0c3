#include "runtime/node/node_runtime.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <map>
#include <memory>
#include <unordered_map>

#include <cblas.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include "base/actor_id.h"
#include "compiler/compiler.h"
#include "comm/transport.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda_kernels.h"
#include "runtime/node/actor_wire.h"
#include "runtime/node/boxing_setup.h"
#include "runtime/node/plan_reader.h"
#include "runtime/node/worker.h"

namespace rill {
namespace {

// Room for a control message's own fields beside the tensors it carries.
constexpr size_t kControlHeadroom = size_t{64} << 10;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// Everything one node builds from its part of the plan.
// What a variable task's piece is a piece of: its own variable, or, for a
// block on a parameter server, the variable the block was cut from (so it
// is initialized, restored, saved and reported as those rows of it).
struct PieceOf {
  std::string name;
  Shape logical;
  Shape offset;
};
PieceOf piece_of_variable(const plan::Task& task, const plan::RegstDesc& model) {
  PieceOf p{read_string(model.name()), read_shape(model.logical_shape()), read_shape(task.variable()->offset())};
  const plan::VariableConf& conf = *task.variable();
  if (conf.whole() != nullptr && conf.whole_shape() != nullptr && conf.whole_offset() != nullptr &&
      conf.whole_offset()->size() == p.offset.size() && conf.whole_shape()->size() == p.offset.size()) {
    p.name = conf.whole()->str();
    p.logical = read_shape(conf.whole_shape());
    for (size_t a = 0; a < p.offset.size(); ++a) p.offset[a] += conf.whole_offset()->Get(static_cast<flatbuffers::uoffset_t>(a));
  }
  return p;
}

class NodeRun : public NodeRuntime {
 public:
  NodeRun(std::string bytes, RunOptions options)
      : bytes_(std::move(bytes)),
        options_(std::move(options)),
        boxing_(options_.transport, options_.stall_timeout_s, options_.tag_base,
                [this](int64_t id) { return regst(id); }) {}
  ~NodeRun() override;
  Status build();
  RunReport run() override;
  void abort(const Status& reason) override { fail(reason); }
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
    return pace;
  }

 private:
  const plan::RegstDesc* regst(int64_t id) const;
  void route(const ActorMsg& msg);
  void receive(int from, const comm::MessageView& message);
  Status allocate_regsts();
  StatusOr<Body> make_body(const plan::Task& task);
  StatusOr<std::shared_ptr<const Dataset>> dataset(int index);
  Status init_variable(const plan::Task& task, Actor& actor);
  // The context of the GPU a task runs on, made on first use.
  StatusOr<CudaContext*> cuda_for(uint32_t device);
  void collect_variables(RunReport& report);
  void fail(const Status& status);

  std::string bytes_;
  RunOptions options_;
  const plan::Plan* plan_ = nullptr;
  std::unordered_map<int64_t, const plan::RegstDesc*> regst_by_id_;
  BoxingSetup boxing_;  // owns the boxings' collectives: declared before the actors using them
  std::vector<std::unique_ptr<void, FreeDeleter>> memory_;
  comm::SendTracker sends_;  // slots handed to the transport without a copy
  std::map<uint32_t, std::unique_ptr<CudaContext>> cuda_;  // by device index; outlives what is below
  std::vector<DeviceBuffer> device_memory_;
  std::unordered_map<int64_t, std::vector<TensorView>> slots_;  // by regst id: one view per slot
  std::vector<std::shared_ptr<const Dataset>> datasets_;
  std::vector<std::unique_ptr<Actor>> actors_;
  std::vector<Actor*> by_index_;
  std::vector<const plan::Task*> variable_tasks_;
  size_t variable_bytes_ = 0;  // of this node's distinct variable pieces
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unordered_map<uint64_t, Worker*> worker_by_key_;
  std::atomic<int64_t> progress_{0};
  std::atomic<int64_t> busy_ns_{0};  // the device threads' acting time
  int64_t acts_per_step_ = 0;        // over every actor of the node
  int device_threads_ = 0;
  std::mutex error_mu_;
  Status first_error_;  // GUARDED_BY(error_mu_)
  std::atomic<bool> failed_{false};
  std::atomic<int64_t> received_bytes_copied_{0};  // into mirror slots
  std::atomic<int64_t> received_zero_row_readies_{0};
  // Per other node: the numbers of the messages sent to it (under mu, with
  // the send) and of the last one received from it (the transport's receive
  // thread, or under the sender's mu on an in-process transport).
  struct Link {
    std::mutex mu;
    uint64_t sent = 0;  // GUARDED_BY(mu)
    std::atomic<uint64_t> received{0};
  };
  std::vector<std::unique_ptr<Link>> links_;
};

const plan::RegstDesc* NodeRun::regst(int64_t id) const {
  auto it = regst_by_id_.find(id);
  return it == regst_by_id_.end() ? nullptr : it->second;
}

// Slots for every regst this node's tasks write, and mirror slots for those
// they read from another node (a `ready` from there carries the bytes).
Status NodeRun::allocate_regsts() {
  for (const plan::RegstDesc* desc : *plan_->regsts()) regst_by_id_[desc->id()] = desc;
  std::vector<int64_t> needed;
  for (const plan::Task* task : *plan_->tasks()) {
    if (task->node() != options_.node) continue;
    for (int64_t r : *task->inputs()) needed.push_back(r);
    for (int64_t r : *task->outputs()) needed.push_back(r);
  }
  std::sort(needed.begin(), needed.end());
  needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
  for (int64_t id : needed) {
    const plan::RegstDesc* desc = regst(id);
    if (!desc) return invalid_argument("plan: a task of node {} names regst {}, which the plan lacks", options_.node, id);
    if (desc->register_num() < 1)
      return invalid_argument("plan: regst '{}' has register_num {}", read_string(desc->name()), desc->register_num());
    TensorMeta meta{read_shape(desc->shape()), read_dtype(desc->dtype())};
    size_t bytes = (meta.bytes() + 63) / 64 * 64;
    if (bytes == 0) bytes = 64;
    auto& views = slots_[id];
    if (desc->device() >= 0) {  // the compiler placed it in that GPU's memory
      RILL_ASSIGN_OR_RETURN(CudaContext * cuda, cuda_for(static_cast<uint32_t>(desc->device())));
      for (int s = 0; s < desc->register_num(); ++s) {
        RILL_ASSIGN_OR_RETURN(void* p, cuda->allocate(bytes, read_string(desc->name()).c_str()));
        device_memory_.emplace_back(p, DeviceFree{cuda});
        views.push_back(TensorView{p, meta.shape, meta.dtype});
      }
      continue;
    }
    for (int s = 0; s < desc->register_num(); ++s) {
      void* p = std::aligned_alloc(64, bytes);
      if (!p) return Status(Code::kUnavailable, fmt::format("out of memory for regst '{}'", read_string(desc->name())));
      std::memset(p, 0, bytes);
      memory_.emplace_back(p);
      views.push_back(TensorView{p, meta.shape, meta.dtype});
    }
  }
  return {};
}

StatusOr<CudaContext*> NodeRun::cuda_for(uint32_t device) {
  auto& ctx = cuda_[device];
  if (!ctx) {
    auto made = CudaContext::create(static_cast<int>(device));
    if (!made.ok()) return made.status().with_context(fmt::format("node {}", options_.node));
    ctx = std::move(*made);
  }
  return ctx.get();
}

StatusOr<std::shared_ptr<const Dataset>> NodeRun::dataset(int index) {
  if (!plan_->datasets() || index < 0 || index >= static_cast<int>(plan_->datasets()->size()))
    return invalid_argument("plan: dataset index {} out of range", index);
  datasets_.resize(plan_->datasets()->size());
  if (!datasets_[index]) {
    RILL_ASSIGN_OR_RETURN(auto opened, Dataset::open(read_dataset(*plan_->datasets()->Get(index))));
    datasets_[index] = std::move(opened);
  }
  return datasets_[index];
}

StatusOr<Body> NodeRun::make_body(const plan::Task& task) {
  std::string name = read_string(task.name());
  switch (task.kind()) {
    case plan::TaskKind::Compute: {
      const OpDef* def = find_op(read_string(task.op_type()));
      if (!def || !def->cpu) return invalid_argument("task '{}': no CPU kernel for op '{}'", name, read_string(task.op_type()));
      std::vector<Shape> logical;
      if (task.logical_input_shapes())
        for (const plan::Shape* s : *task.logical_input_shapes()) logical.push_back(read_shape(s->dims()));
      KernelFn kernel = nullptr;  // the op's CPU kernel
      CudaContext* cuda = nullptr;
      if (ActorId::device_type(task.id()) == DeviceType::kCuda) {
        kernel = find_cuda_kernel(def->type);
        if (!kernel) return invalid_argument("task '{}': no CUDA kernel for op '{}'", name, def->type);
        RILL_ASSIGN_OR_RETURN(cuda, cuda_for(ActorId::device(task.id())));
      }
      return Body(std::in_place_type<ComputeBody>, def, read_attrs(task.attrs()), std::move(logical),
                  static_cast<size_t>(task.scratch_bytes()), kernel, cuda);
    }
    case plan::TaskKind::Source: {
      const plan::SourceConf* conf = task.source();
      if (!conf) return invalid_argument("task '{}': source without its conf", name);
      RILL_ASSIGN_OR_RETURN(auto data, dataset(conf->dataset()));
      std::vector<int> fields;
      if (conf->fields())
        for (const flatbuffers::String* f : *conf->fields()) {
          RILL_ASSIGN_OR_RETURN(int index, data->field_index(f->str()));
          fields.push_back(index);
        }
      BatchSampler sampler(data->num_samples(), conf->global_batch(), conf->shard(), conf->num_shards(),
                           conf->shuffle(), conf->seed(), conf->sub_shard(), conf->num_sub_shards(),
                           plan_->micro_batches(), conf->rows_by_rank());
      RILL_RETURN_IF_ERROR(sampler.validate().with_context(fmt::format("dataset '{}'", data->name())));
      return Body(std::in_place_type<SourceBody>, std::move(data), std::move(fields), std::move(sampler));
    }
    case plan::TaskKind::Variable: {
      const plan::VariableConf* conf = task.variable();
      if (!conf || !task.outputs() || task.outputs()->size() != static_cast<flatbuffers::uoffset_t>(std::max(1, conf->lanes())))
        return invalid_argument("task '{}': variable without its conf or model regst (one per lane)", name);
      const plan::RegstDesc* model = regst(task.outputs()->Get(0));
      const OpDef* init = find_op(read_string(conf->init_op()));
      if (!init || init->role != OpRole::kInitializer)
        return invalid_argument("task '{}': unknown initializer '{}'", name, read_string(conf->init_op()));
      const OpDef* update = nullptr;
      if (!read_string(conf->update_op()).empty()) {
        update = find_op(read_string(conf->update_op()));
        if (!update || update->role != OpRole::kUpdate)
          return invalid_argument("task '{}': unknown optimizer update '{}'", name, read_string(conf->update_op()));
      }
      PieceOf of = piece_of_variable(task, *model);
      Body body(std::in_place_type<VariableBody>, init, read_attrs(conf->init_attrs()), std::move(of.logical),
                std::move(of.offset), update, read_attrs(conf->update_attrs()),
                TensorMeta{read_shape(model->shape()), read_dtype(model->dtype())});
      const int lanes = conf->lanes();
      if (lanes > 1) {
        // One gradient and one model regst per lane (an async pserver's block).
        if (static_cast<int>(task.inputs()->size()) != lanes || static_cast<int>(task.outputs()->size()) != lanes ||
            ActorId::device_type(task.id()) == DeviceType::kCuda || !(conf->dc_asgd_lambda() >= 0))
          return invalid_argument("task '{}': a variable of {} lanes needs as many gradients and models in host "
                                  "memory (has {} and {}), and a DC-ASGD lambda >= 0",
                                  name, lanes, task.inputs() ? task.inputs()->size() : 0, task.outputs()->size());
        std::get<VariableBody>(body).set_lanes(lanes, conf->dc_asgd_lambda());
      }
      if (ActorId::device_type(task.id()) == DeviceType::kCuda) {
        RILL_ASSIGN_OR_RETURN(CudaContext * cuda, cuda_for(ActorId::device(task.id())));
        KernelFn update_kernel = update ? find_cuda_kernel(update->type) : nullptr;
        RILL_RETURN_IF_ERROR(std::get<VariableBody>(body).use_device(cuda, update_kernel)
                                 .with_context(fmt::format("task '{}'", name)));
      }
      return body;
    }
    case plan::TaskKind::Boxing:
      return boxing_.body(task);
    case plan::TaskKind::Sink: {
      const plan::SinkConf* conf = task.sink();
      std::vector<std::string> names;
      std::vector<bool> partial;
      if (conf && conf->names())
        for (const flatbuffers::String* n : *conf->names()) names.push_back(n->str());
      if (conf && conf->partial())
        for (uint8_t p : *conf->partial()) partial.push_back(p != 0);
      std::vector<std::string> fetch;
      if (conf && conf->fetch())
        for (const flatbuffers::String* f : *conf->fetch()) fetch.push_back(f->str());
      if (names.size() != partial.size() || !task.inputs() || names.size() + fetch.size() != task.inputs()->size())
        return invalid_argument("task '{}': sink names, partial flags, fetched tensors and inputs disagree", name);
      const int ranks = conf ? conf->ranks() : 0;
      if (ranks < 0 || static_cast<size_t>(ranks) > task.inputs()->size())
        return invalid_argument("task '{}': sink ranks {} outside [0, {}] (its inputs)", name, ranks,
                                task.inputs()->size());
      return Body(std::in_place_type<SinkBody>, std::move(names), std::move(partial), options_.on_step,
                  std::move(fetch), task.acts_per_step(), ranks);
    }
    case plan::TaskKind::Send:
    case plan::TaskKind::Recv:
      if (task.inputs()->size() != 1 || task.outputs()->size() != 1)
        return invalid_argument("task '{}': send/recv needs one input and one output", name);
      return Body(std::in_place_type<CopyBody>);
    case plan::TaskKind::Copy: {
      if (task.inputs()->size() != 1 || task.outputs()->size() != 1)
        return invalid_argument("task '{}': copy needs one input and one output", name);
      const bool from_device = regst(task.inputs()->Get(0))->device() >= 0;
      RILL_ASSIGN_OR_RETURN(CudaContext * cuda, cuda_for(ActorId::device(task.id())));
      return Body(std::in_place_type<CopyBody>, cuda, from_device ? CopyKind::kDeviceToHost : CopyKind::kHostToDevice,
                  "task '" + name + "'");
    }
  }
  return invalid_argument("task '{}': unknown task kind", name);
}

Status NodeRun::init_variable(const plan::Task& task, Actor& actor) {
  auto& body = std::get<VariableBody>(actor.body());
  const plan::RegstDesc* model = regst(task.outputs()->Get(0));
  const TensorView& slot = slots_[model->id()][0];
  const PieceOf origin = piece_of_variable(task, *model);
  const std::string& var = origin.name;
  const Shape& logical = origin.logical;
  const Shape& offset = origin.offset;
  // This piece of a logical tensor given by the caller, or empty if not given.
  auto piece_of = [&](const std::map<std::string, std::vector<float>>& values,
                      const std::string& name) -> StatusOr<std::vector<float>> {
    auto it = values.find(name);
    if (it == values.end()) return std::vector<float>{};
    if (static_cast<int64_t>(it->second.size()) != num_elements(logical))
      return invalid_argument("initial values of '{}' hold {} elements, its shape {} needs {}", name,
                              it->second.size(), shape_string(logical), num_elements(logical));
    std::vector<float> piece(static_cast<size_t>(slot.size()));
    copy_block(logical, offset, slot.shape, const_cast<float*>(it->second.data()), piece.data(), true);
    return piece;
  };
  RILL_ASSIGN_OR_RETURN(std::vector<float> values, piece_of(options_.initial_values, var));
  RILL_RETURN_IF_ERROR(body.init(slot, values));
  const OpDef* update = find_op(read_string(task.variable()->update_op()));
  std::vector<std::string> state_names;
  for (int i = 0; update && i < update->num_state; ++i) {
    state_names.push_back(update->state_names[i] ? update->state_names[i] : fmt::format("state{}", i));
    RILL_ASSIGN_OR_RETURN(std::vector<float> state, piece_of(options_.initial_state, var + "/" + state_names.back()));
    if (!state.empty()) RILL_RETURN_IF_ERROR(body.load_state(i, state));
  }
  // One snapshot per distinct piece over the cluster: replicas of a
  // broadcast variable agree, and the lowest rank holding it (the compiler
  // marks the others) reports it.
  const bool first_of_piece = !task.variable()->replica();
  // What goes back to the master in control messages must fit in one.
  const size_t cap = options_.max_control_message_bytes;
  const size_t piece_bytes = static_cast<size_t>(slot.size()) * sizeof(float);
  if (first_of_piece) variable_bytes_ += piece_bytes;
  if (cap > 0 && options_.on_snapshot && first_of_piece &&
      piece_bytes * (1 + state_names.size()) + kControlHeadroom > cap)
    return invalid_argument("its checkpoint piece ({} bytes with its optimizer state) does not fit in a control "
                            "message to the master (--max-message-bytes {})",
                            piece_bytes * (1 + state_names.size()), cap);
  if (options_.on_snapshot && first_of_piece)
    body.on_snapshot(
        [this, var, logical, offset, shape = slot.shape, state_names](
            int64_t done, std::span<const float> model, std::span<const std::vector<float>> state) {
          VariablePiece piece{var, logical, offset, shape, std::vector<float>(model.begin(), model.end()), {}};
          for (size_t i = 0; i < state.size(); ++i) piece.state.emplace_back(state_names[i], state[i]);
          options_.on_snapshot(done, std::move(piece));
        },
        options_.snapshot_every, plan_->steps());
  return {};
}

Status NodeRun::build() {
  // Before this node acks its plan, so before any peer may send for this run:
  // a finished run's stragglers and anything else outside the run's tags are
  // dropped and counted instead of piling up.
  if (options_.transport) options_.transport->accept_tags(options_.tag_base, options_.tag_base + kTagsPerRun);
  auto verified = compiler::verify_plan(bytes_);
  if (!verified.ok()) return verified.status();
  int gpus = 0;  // the GPUs this node's part of the plan runs on
  for (const plan::Task* task : *(*verified)->tasks())
    if (task->node() == options_.node && ActorId::device_type(task->id()) == DeviceType::kCuda)
      gpus = std::max(gpus, static_cast<int>(ActorId::device(task->id())) + 1);
  if (gpus > 0) RILL_RETURN_IF_ERROR(require_cuda_devices(gpus, fmt::format("node {}", options_.node)));
  plan_ = *verified;
  if (options_.transport) {
    // The largest message this run can receive: a regst's slot (collectives
    // move pieces of regsts), a zero-row bitmap of it, and a header.
    int64_t largest = 0, all = 0;
    for (const plan::RegstDesc* r : *plan_->regsts()) {
      largest = std::max(largest, r->bytes());
      all += r->bytes() * std::max(1, r->register_num());
    }
    options_.transport->limit_message_bytes(static_cast<size_t>(largest + largest / 64 + (int64_t{64} << 10)));
    // What a peer may have sent that waits unread here: collectives'
    // pieces (actor messages go straight to their handlers), at most every
    // regst of the plan twice over (a peer runs at most one collective
    // ahead on each), and 64 MiB of slack.
    options_.transport->limit_unread_bytes(static_cast<size_t>(2 * all + (int64_t{64} << 20)));
  }
  for (int n = 0; n < plan_->num_nodes(); ++n) links_.push_back(std::make_unique<Link>());
  if (options_.start_step < 0 || options_.start_step >= plan_->steps())
    return invalid_argument("cannot start at step {}: the plan runs {} steps", options_.start_step, plan_->steps());
  RILL_RETURN_IF_ERROR(allocate_regsts());
  const auto& tasks = *plan_->tasks();
  by_index_.assign(static_cast<size_t>(std::max<int64_t>(plan_->num_tasks(), tasks.size())), nullptr);
  for (const plan::Task* task : tasks) {
    if (task->node() != options_.node) continue;
    std::string name = read_string(task->name());
    std::vector<InputPort> inputs;
    for (int64_t r : *task->inputs()) {
      const plan::RegstDesc* desc = regst(r);
      InputPort in;
      in.regst = r;
      in.name = read_string(desc->name());
      in.producer = desc->producer();
      in.slots = slots_[r];
      in.fifo.assign(static_cast<size_t>(desc->register_num()), 0);
      in.acts_per_slot = task->acts_per_step() / desc->readies_per_step();  // verified: divides
      inputs.push_back(std::move(in));
    }
    std::vector<OutputPort> outputs;
    for (int64_t r : *task->outputs()) {
      const plan::RegstDesc* desc = regst(r);
      OutputPort out;
      out.regst = r;
      out.name = read_string(desc->name());
      if (desc->consumers()) out.consumers.assign(desc->consumers()->begin(), desc->consumers()->end());
      out.slots = slots_[r];
      out.pending.assign(out.slots.size(), 0);
      out.acts_per_slot = task->acts_per_step() / desc->readies_per_step();
      outputs.push_back(std::move(out));
    }
    RILL_ASSIGN_OR_RETURN(Body body, make_body(*task));
    auto actor = std::make_unique<Actor>(task->id(), name, plan_->steps() - options_.start_step, std::move(inputs),
                                         std::move(outputs), std::move(body), options_.start_step,
                                         task->acts_per_step());
    if (task->kind() == plan::TaskKind::Variable) {
      RILL_RETURN_IF_ERROR(init_variable(*task, *actor).with_context(fmt::format("variable '{}'", name)));
      variable_tasks_.push_back(task);
    }
    if (options_.trace) actor->enable_trace();
    uint64_t key = ActorId::thread_key(task->id());
    Worker*& worker = worker_by_key_[key];
    if (!worker) {
      const DeviceType type = ActorId::device_type(task->id());
      const bool device = type == DeviceType::kCpu || type == DeviceType::kCuda;
      device_threads_ += device ? 1 : 0;
      workers_.push_back(std::make_unique<Worker>(
          key, std::max(1, static_cast<int>(plan_->micro_batches())), [this](const ActorMsg& msg) { route(msg); },
          [this](const Status& status) { fail(status); }, &progress_, device ? &busy_ns_ : nullptr));
      worker = workers_.back().get();
    }
    acts_per_step_ += task->acts_per_step();
    worker->add_actor(actor.get());
    by_index_[ActorId::index(task->id())] = actor.get();
    actors_.push_back(std::move(actor));
  }
  const size_t cap = options_.max_control_message_bytes;
  if (cap > 0 && variable_bytes_ + kControlHeadroom > cap)
    return invalid_argument("its variables ({} bytes) do not fit in a control message to the master "
                            "(--max-message-bytes {})", variable_bytes_, cap);
  if (options_.transport)
    options_.transport->set_handler(options_.tag_base, [this](int from, const comm::MessageView& message) {
      receive(from, message);
    });
  return {};
}

NodeRun::~NodeRun() {
  if (options_.transport) options_.transport->set_handler(options_.tag_base, nullptr);
  // A slot sent without a copy (an actor's ready, a boxing's pieces) is read
  // by the transport until the message leaves; one queued for a peer that is
  // gone (or whose connection dropped) may be read after this run ends, when
  // ZeroMQ dials again. Its memory is then kept, not freed under it.
  const auto deadline = comm::Clock::now() + std::chrono::milliseconds(500);
  if (sends_.wait(deadline).ok() && boxing_.wait_sends(deadline)) return;
  size_t kept = 0;
  for (auto& block : memory_) {
    (void)block.release();
    ++kept;
  }
  spdlog::warn("node {}: {} message(s) to another node still read this run's memory: its {} host buffer(s) are kept",
               options_.node, sends_.in_flight() + boxing_.sends_in_flight(), kept);
}

// Delivers a message between threads: to a worker of this node, or over the
// transport to another node. A `ready` crossing nodes carries its slot's bytes
// (zero-copy: the slot is not rewritten before the consumer's ack returns),
// or, where at least a quarter of its rows are zeros, the other rows only
// (copied after the header; runtime/node/actor_wire.h). Each message is
// numbered on its link, and a slot's bytes carry their checksum (taken
// before the lock: the slot does not change until the reader acks).
void NodeRun::route(const ActorMsg& msg) {
  if (options_.drop_message && options_.drop_message(msg)) return;
  int node = static_cast<int>(ActorId::node(msg.dst));
  if (node != options_.node) {
    if (!options_.transport) {
      fail(internal_error("actor {} is on node {}, but this run has no transport", ActorId::to_string(msg.dst), node));
      return;
    }
    std::span<const std::byte> body;
    int64_t rows = 0;  // the slot's rows: a matrix's may cross with zero rows left out
    if (msg.type == MsgType::kReady && !msg.repeat) {  // slots_ is read-only while running: find, never insert
      auto it = slots_.find(msg.regst);
      if (it == slots_.end() || msg.slot < 0 || msg.slot >= static_cast<int>(it->second.size())) {
        fail(internal_error("ready for regst {} slot {}, which node {} does not hold", msg.regst, msg.slot,
                            options_.node));
        return;
      }
      const TensorView& slot = it->second[msg.slot];
      body = std::span<const std::byte>(static_cast<const std::byte*>(slot.data), slot.bytes());
      rows = zero_row_rows(slot.shape);
    }
    thread_local std::vector<std::byte> header;
    thread_local std::vector<uint8_t> kept;  // the rows that are not zeros
    WireExtras extras;
    extras.checksum = body.empty() ? 0 : XXH3_64bits(body.data(), body.size());
    extras.zero_rows = rows > 0 && mark_zero_rows(body, rows, &kept);
    Status sent;
    {
      // Numbered and sent in one go, so the link carries them in order.
      Link& link = *links_[static_cast<size_t>(node)];
      std::lock_guard<std::mutex> lock(link.mu);
      extras.seq = ++link.sent;
      encode_actor_message(msg, &header, extras);
      if (extras.zero_rows) {
        append_kept_rows(body, rows, kept, &header);
        body = {};
      }
      const size_t cap = options_.transport->max_message_bytes();
      if (cap > 0 && std::max(header.size(), body.size()) > cap) {
        // The peer's ZeroMQ would refuse the frame and drop the connection.
        const plan::RegstDesc* desc = regst(msg.regst);
        sent = invalid_argument("regst '{}' ({} bytes) crosses from node {} to node {} in one message, larger than "
                                "the data plane takes (--max-message-bytes {})",
                                desc ? read_string(desc->name()) : std::to_string(msg.regst),
                                std::max(header.size(), body.size()), options_.node, node, cap);
      } else {
        sent = options_.transport->send(node, options_.tag_base, header, body, &sends_);
      }
    }
    if (!sent.ok()) fail(sent.with_context(fmt::format("sending {} to node {}", msg_type_name(msg.type), node)));
    return;
  }
  auto it = worker_by_key_.find(ActorId::thread_key(msg.dst));
  if (it == worker_by_key_.end()) {
    fail(internal_error("no thread on node {} runs actor {}", options_.node, ActorId::to_string(msg.dst)));
    return;
  }
  it->second->push(msg);
}

// An actor message from another node (the transport's receive thread).
void NodeRun::receive(int from, const comm::MessageView& message) {
  ActorMsg msg;
  std::span<const std::byte> body;
  WireExtras extras;
  // The header is at the start of the first part; the body follows it there
  // (a small message) or is the second part, read in place.
  Status decoded = decode_actor_message(message.first, &msg, &body, &extras);
  const bool zero_rows = extras.zero_rows;
  if (decoded.ok() && !message.second.empty()) {
    if (!body.empty())
      decoded = data_loss("actor message body split across buffers ({} + {} bytes)", body.size(),
                          message.second.size());
    body = message.second;
  }
  if (decoded.ok() && static_cast<int>(ActorId::node(msg.dst)) != options_.node)
    decoded = data_loss("message for actor {} arrived at node {}", ActorId::to_string(msg.dst), options_.node);
  if (decoded.ok() && (from < 0 || from >= static_cast<int>(links_.size()) || from == options_.node))
    decoded = data_loss("message from node {}, which is not another node of this run", from);
  if (decoded.ok()) {
    // One message after the other: a gap, a repeat or a swap is a fault of
    // the link, never a message to act on.
    std::atomic<uint64_t>& received = links_[static_cast<size_t>(from)]->received;
    uint64_t due = received.load(std::memory_order_relaxed) + 1;
    if (extras.seq != due)
      decoded = data_loss("the link from node {} to node {}: message {} came where {} was due ({})", from,
                          options_.node, extras.seq, due,
                          extras.seq > due ? "a message was lost" : "a message came twice or out of order");
    else
      received.store(due, std::memory_order_relaxed);
  }
  if (decoded.ok() && msg.type == MsgType::kReady) {
    // The bytes go straight into the mirror slot the consumers read (a
    // repeat's came with an earlier ready of this slot, in order).
    auto it = slots_.find(msg.regst);
    if (it == slots_.end() || msg.slot < 0 || msg.slot >= static_cast<int>(it->second.size()) ||
        (msg.repeat ? !body.empty() || zero_rows
                    : !zero_rows && it->second[msg.slot].bytes() != body.size()) ||
        (zero_rows && zero_row_rows(it->second[msg.slot].shape) == 0)) {
      decoded = data_loss("ready for regst {} slot {} with {} bytes{} does not match this node's plan", msg.regst,
                          msg.slot, body.size(), msg.repeat ? " (a repeat)" : zero_rows ? " (zero rows left out)" : "");
    } else if (zero_rows) {
      const TensorView& slot = it->second[msg.slot];
      decoded = expand_zero_rows(body, zero_row_rows(slot.shape),
                                 std::span<std::byte>(static_cast<std::byte*>(slot.data), slot.bytes()))
                    .with_context(fmt::format("ready for regst {} slot {}", msg.regst, msg.slot));
      received_bytes_copied_.fetch_add(static_cast<int64_t>(body.size()), std::memory_order_relaxed);
      received_zero_row_readies_.fetch_add(1, std::memory_order_relaxed);
    } else if (!msg.repeat && !body.empty()) {
      std::memcpy(it->second[msg.slot].data, body.data(), body.size());
      received_bytes_copied_.fetch_add(static_cast<int64_t>(body.size()), std::memory_order_relaxed);
    }
    if (decoded.ok() && !msg.repeat) {
      const TensorView& slot = it->second[msg.slot];
      const uint64_t sum = slot.bytes() == 0 ? 0 : XXH3_64bits(slot.data, slot.bytes());
      if (sum != extras.checksum)
        decoded = data_loss("the link from node {} to node {}: regst {} slot {} arrived corrupted (checksum {:016x}, "
                            "sent as {:016x})",
                            from, options_.node, msg.regst, msg.slot, sum, extras.checksum);
    }
  }
  if (!decoded.ok()) {
    fail(decoded.with_context(fmt::format("message from node {}", from)));
    return;
  }
  route(msg);
}

void NodeRun::fail(const Status& status) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    first = first_error_.ok();
    if (first) first_error_ = status;
  }
  failed_.store(true);
  for (auto& worker : workers_) worker->stop();
  // Collectives waiting on a peer end now, not at their deadlines.
  if (first && options_.transport)
    options_.transport->cancel_tags(options_.tag_base, options_.tag_base + kTagsPerRun,
                                    "the run was stopped: " + status.message());
}

RunReport NodeRun::run() {
  using Clock = std::chrono::steady_clock;
  RunReport report;
  report.steps = plan_->steps();
  // A cpu device is one thread: its GEMMs must not spawn more.
  openblas_set_num_threads(1);
  auto start = Clock::now();
  for (auto& worker : workers_) worker->start(&by_index_);
  int64_t last_progress = -1;
  auto last_change = Clock::now();
  bool stalled = false;
  for (;;) {
    bool all_done = true;
    for (auto& worker : workers_)
      if (!worker->finished()) all_done = false;
    if (all_done || failed_.load()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    int64_t now_progress = progress_.load();
    if (now_progress != last_progress) {
      last_progress = now_progress;
      last_change = Clock::now();
    } else if (std::chrono::duration<double>(Clock::now() - last_change).count() > options_.stall_timeout_s) {
      stalled = true;
      for (auto& worker : workers_) worker->stop();
      break;
    }
  }
  for (auto& worker : workers_) worker->join();
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (stalled) {
    std::string waiting;
    for (const auto& actor : actors_)
      if (!actor->retired()) waiting += "\n  " + actor->describe_wait();
    report.status = Status(Code::kDeadlineExceeded,
                           fmt::format("job stuck: no actor acted for {:.1f} s; waiting actors:{}",
                                       options_.stall_timeout_s, waiting));
  } else {
    std::lock_guard<std::mutex> lock(error_mu_);
    report.status = first_error_;
  }
  if (report.status.ok()) collect_variables(report);
  report.received_bytes_copied = received_bytes_copied_.load();
  report.received_zero_row_readies = received_zero_row_readies_.load();
  if (options_.trace)
    for (const auto& actor : actors_) {
      const auto* boxing = std::get_if<BoxingBody>(&actor->body());
      report.traces.push_back({actor->id(), actor->name(), actor->trace(), actor->acts_per_step(),
                               boxing != nullptr ? boxing->collective() : std::string()});
    }
  return report;
}

void NodeRun::collect_variables(RunReport& report) {
  for (const plan::Task* task : variable_tasks_) {
    const plan::RegstDesc* model = regst(task->outputs()->Get(0));
    auto [var, logical, offset] = piece_of_variable(*task, *model);
    VariableValue& value = report.variables[var];
    if (value.values.empty()) {
      value.shape = logical;
      value.values.assign(static_cast<size_t>(num_elements(logical)), 0.0f);
    }
    const TensorView& slot = slots_[model->id()][0];
    std::vector<float> host;
    Status read = std::get<VariableBody>(by_index_[ActorId::index(task->id())]->body()).read_model(slot, &host);
    if (!read.ok()) {
      report.status = read.with_context(fmt::format("reading variable '{}'", var));
      return;
    }
    copy_block(logical, offset, slot.shape, value.values.data(), host.data(), false);
    // A broadcast variable's replicas are one piece, reported by the lowest
    // rank that holds it (the master has it already, or another node sends it).
    if (!task->variable()->replica())
      report.pieces.push_back(VariablePiece{var, logical, offset, slot.shape, std::move(host)});
  }
}

}  // namespace

StatusOr<std::unique_ptr<NodeRuntime>> NodeRuntime::build(std::string plan_bytes, RunOptions options) {
  auto run = std::make_unique<NodeRun>(std::move(plan_bytes), std::move(options));
  RILL_RETURN_IF_ERROR(run->build());
  return std::unique_ptr<NodeRuntime>(std::move(run));
}

RunReport run_plan(std::string_view plan_bytes, const RunOptions& options) {
  auto runtime = NodeRuntime::build(std::string(plan_bytes), options);
  if (!runtime.ok()) {
    RunReport report;
    report.status = runtime.status();
    return report;
  }
  return (*runtime)->run();
}

}  // namespace rill
