#include "runtime/node/node_runtime.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include <cblas.h>
#include <spdlog/spdlog.h>

#include "base/actor_id.h"
#include "compiler/compiler.h"
#include "runtime/node/node_run.h"
#include "runtime/node/plan_reader.h"

namespace rill {

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
    // move pieces of regsts), or a bucket's tensors together (one
    // all-reduce for them all, its messages pieces of their concatenation),
    // a zero-row bitmap of it, and a header.
    int64_t largest = 0, all = 0;
    std::unordered_map<int64_t, int64_t> bytes_of;
    for (const plan::RegstDesc* r : *plan_->regsts()) {
      largest = std::max(largest, r->bytes());
      all += r->bytes() * std::max(1, r->register_num());
      bytes_of[r->id()] = r->bytes();
    }
    for (const plan::Task* task : *plan_->tasks()) {
      if (task->node() != options_.node || !task->boxing() || task->boxing()->tensors() <= 1) continue;
      int64_t in = 0, out = 0;
      for (int64_t r : *task->inputs()) in += bytes_of[r];
      for (int64_t r : *task->outputs()) out += bytes_of[r];
      largest = std::max({largest, in, out});
    }
    largest = std::max(largest, static_cast<int64_t>(options_.side_message_bytes));
    options_.transport->limit_message_bytes(static_cast<size_t>(largest + largest / 64 + (int64_t{64} << 10)));
    // What a peer may have sent that waits unread here: collectives'
    // pieces (actor messages go straight to their handlers), at most every
    // regst of the plan twice over (a peer runs at most one collective
    // ahead on each), another stream's, and 64 MiB of slack.
    options_.transport->limit_unread_bytes(
        static_cast<size_t>(2 * all + static_cast<int64_t>(options_.side_unread_bytes) + (int64_t{64} << 20)));
  }
  for (int n = 0; n < plan_->num_nodes(); ++n) links_.push_back(std::make_unique<Link>());
  if (options_.start_step < 0 || options_.start_step >= plan_->steps())
    return invalid_argument("cannot start at step {}: the plan runs {} steps", options_.start_step, plan_->steps());
  end_ = std::make_unique<RunEnd>(options_.start_step, plan_->steps());
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
    actor->set_end(end_.get());
    if (task->kind() == plan::TaskKind::Variable) {
      RILL_RETURN_IF_ERROR(init_variable(*task, *actor).with_context(fmt::format("variable '{}'", name)));
      variable_tasks_.push_back(task);
    }
    if (task->kind() == plan::TaskKind::Boxing)
      RILL_RETURN_IF_ERROR(init_boxing(*task, *actor).with_context(fmt::format("boxing '{}'", name)));
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
      if (type == DeviceType::kCuda) {
        RILL_ASSIGN_OR_RETURN(CudaContext * cuda, cuda_for(ActorId::device(task->id())));
        worker->use_device(cuda);
      }
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
  // NCCL's communicators end (aborted) before the GPU contexts wait for
  // their streams (members destroyed after this body).
  boxing_.cancel("the run ended");
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
  for (auto& block : pinned_memory_) {  // page-locked host slots may cross nodes too
    (void)block.release();
    ++kept;
  }
  spdlog::warn("node {}: {} message(s) to another node still read this run's memory: its {} host buffer(s) are kept",
               options_.node, sends_.in_flight() + boxing_.sends_in_flight(), kept);
  boxing_.keep_buffers();  // the device collectives' own, sent without a copy too
}

void NodeRun::fail(const Status& status) {
  bool first = false;
  {
    MutexLock lock(error_mu_);
    first = first_error_.ok();
    if (first) first_error_ = status;
  }
  failed_.store(true);
  for (auto& worker : workers_) worker->stop();
  if (options_.on_abort) options_.on_abort();
  if (first) boxing_.cancel("the run was stopped: " + status.message());
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
  const int64_t synchronizes_before = CudaContext::synchronizes();
  uint64_t last_progress = ~uint64_t{0};  // no count yet
  auto last_change = Clock::now();
  bool stalled = false;
  std::vector<comm::FlightRecord::Wait> stalled_waits;
  std::string stalled_outside;  // what was being written when the run stalled
  uint64_t polls = 0;
  // Alone, the node agrees its end with itself (a stop asked for before
  // the workers start runs no step); across nodes the master agrees it with
  // every node (runtime/cluster) and calls hold and end_at.
  bool stop_taken = false;
  auto take_stop = [&] {
    if (options_.stop && !options_.transport && !stop_taken && options_.stop->load()) {
      stop_taken = true;
      end_at(RunEnd::agreed_end(end_->first(), plan_->steps(), hold()));
    }
  };
  take_stop();
  // Device collectives' communicators, now that every node has built.
  if (Status joined = boxing_.start(); !joined.ok()) {
    fail(joined);
  } else {
    for (auto& worker : workers_) worker->start(&by_index_);
  }
  for (;;) {
    bool all_done = true;
    for (auto& worker : workers_)
      if (!worker->finished()) all_done = false;
    if (all_done || failed_.load()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    take_stop();
    // NCCL's errors (a peer gone mid-call) as soon as it sees them: a
    // stream waiting on a peer never makes the device thread fail itself.
    if (++polls % 50 == 0) {
      if (Status nccl = boxing_.check_nccl(); !nccl.ok()) {
        fail(nccl.with_context(fmt::format("node {}", options_.node)));
        break;
      }
    }
    // Acts, and work the run waits for elsewhere (a checkpoint being written).
    const uint64_t now_progress =
        static_cast<uint64_t>(progress_.load()) + (options_.liveness ? options_.liveness() : 0);
    if (now_progress != last_progress) {
      last_progress = now_progress;
      last_change = Clock::now();
    } else if (std::chrono::duration<double>(Clock::now() - last_change).count() > options_.stall_timeout_s) {
      stalled = true;
      stalled_waits = record_.waits();  // before the cancel below ends the waits
      stalled_outside = options_.describe_liveness ? options_.describe_liveness() : "";
      for (auto& worker : workers_) worker->stop();
      if (options_.on_abort) options_.on_abort();
      boxing_.cancel("the run stalled");  // ranks waiting in a device collective, NCCL's streams
      // Collectives waiting on a peer (a shared GPU's barriers among them)
      // end now, so the workers join at once.
      if (options_.transport)
        options_.transport->cancel_tags(options_.tag_base, options_.tag_base + kTagsPerRun, "the run stalled");
      break;
    }
  }
  for (auto& worker : workers_) worker->join();
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  report.steps = end_->end();
  report.whole_plan = report.steps == plan_->steps() && report.steps > options_.start_step;
  report.device_synchronizes = CudaContext::synchronizes() - synchronizes_before;
  if (stalled) {
    std::string waiting;
    for (const auto& actor : actors_)
      if (!actor->retired()) waiting += "\n  " + actor->describe_wait();
    // Which node each collective waited for when the run was stopped.
    std::string collectives;
    for (const comm::FlightRecord::Wait& wait : stalled_waits) collectives += "\n  " + wait.line;
    report.status = Status(Code::kDeadlineExceeded,
                           fmt::format("job stuck: no actor acted for {:.1f} s; waiting actors:{}{}{}",
                                       options_.stall_timeout_s, waiting,
                                       collectives.empty() ? "" : "\n collectives waiting:" + collectives,
                                       stalled_outside.empty() ? "" : "\n still writing: " + stalled_outside));
  } else {
    MutexLock lock(error_mu_);
    report.status = first_error_;
  }
  if (report.status.ok()) {
    collect_variables(report);
    // The carried state at the run's last step (a stop may have brought it
    // forward): the variables' last snapshot is of that step too.
    const int64_t end = end_->end();
    if (end > end_->first() && !(options_.snapshot_every > 0 && end % options_.snapshot_every == 0))
      for (const auto& [body, pieces] : carried_) snapshot_carried(pieces, end, body->carried());
    boxing_.finish();  // every node ran to its end: ranks sharing a GPU let go of each other's buffers
  }
  report.comm_record = record_.json(32).dump();
  report.received_bytes_copied = received_bytes_copied_.load();
  report.received_zero_row_readies = received_zero_row_readies_.load();
  if (options_.trace)
    for (const auto& actor : actors_) {
      const auto* boxing = std::get_if<BoxingBody>(&actor->body());
      const auto* device = std::get_if<DeviceCollectiveBody>(&actor->body());
      report.traces.push_back({actor->id(), actor->name(), actor->trace(), actor->acts_per_step(),
                               boxing != nullptr   ? boxing->collective()
                               : device != nullptr ? device->collective()
                                                   : std::string()});
    }
  return report;
}

int64_t NodeRun::hold() { return end_->hold(); }

void NodeRun::end_at(int64_t end) {
  end_->release(end);
  // Sources and variables held, or done at the new end, look again.
  for (auto& worker : workers_)
    for (Actor* actor : worker->actors())
      if (actor->begins_steps()) worker->push(ActorMsg{0, actor->id(), MsgType::kWake, 0, 0, 0});
}

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
