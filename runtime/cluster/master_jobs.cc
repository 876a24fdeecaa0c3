// The master's side of running a job on the cluster: queue, phases, results.
#include "runtime/cluster/master.h"
#include "runtime/cluster/comm_waits.h"

#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "base/printable.h"
#include "comm/counting_transport.h"
#include "compiler/compiler.h"
#include "compiler/pserver.h"
#include "graph/job_file.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/cluster/control_codec.h"
#include "runtime/cluster/memory_pieces.h"
#include "runtime/cluster/memory_transfer.h"
#include "runtime/cluster/job_runner.h"
#include "runtime/node/carried_state.h"
#include "runtime/node/node_runtime.h"
#include "runtime/node/plan_reader.h"

namespace rill::agent_internal {

namespace {

// The whole training plan as DOT for the dashboard (a box per op, or per
// layer), when it is small enough
// to compile here in passing and to draw (each node compiles only its own
// part to run); "" otherwise. Compiled for `steps`, the training plan's,
// so the datasets are not opened to count them (one may be a pipe that only
// its reader may drain).
std::string plan_to_draw(const graph::Job& job, const std::string& devices_per_node, int world, int64_t steps) {
  constexpr int kMaxDevices = 64;
  constexpr int64_t kMaxTasks = 5000;  // compiled in passing: about 0.3 s
  auto cluster = compiler::parse_devices(devices_per_node, world);
  if (!cluster.ok() || world * cluster->devices_per_node > kMaxDevices) return {};
  compiler::CompileOptions options;
  options.steps = steps;
  auto bytes = compiler::compile(job, *cluster, options);
  if (!bytes.ok()) return {};
  auto plan = compiler::verify_plan(*bytes);
  if (!plan.ok() || (*plan)->num_tasks() > kMaxTasks) return {};
  return compiler::plan_dot_ops(**plan, /*max_boxes=*/300);  // a box per op or layer: drawn in seconds
}

}  // namespace

void Master::start_next_job() {
  if (job_running_ || queue_.empty()) return;
  if (job_thread_.joinable()) job_thread_.join();
  QueuedJob job = std::move(queue_.front());
  queue_.pop_front();
  queued_bytes_ -= job.submit.job_text.size();
  job_running_ = true;
  running_id_ = job.id;
  running_name_ = job.job.name;
  job_thread_ = std::thread([this, job = std::move(job)]() mutable { run_queued(std::move(job)); });
}

// The master's job thread: compile, run every phase on every node, reply.
void Master::run_queued(QueuedJob queued) {
  std::string client = queued.client;
  bool follow = queued.submit.follow;
  JobRunOptions options;
  stop_job_ = false;
  regroup_ = false;
  options.stop = &stop_job_;
  options.regroup = &regroup_;
  options.devices = queued.submit.devices.empty() ? options_.devices : queued.submit.devices;
  options.devices_from = queued.submit.devices.empty() ? "the agents' --devices" : "the submit's --devices";
  options.checkpoint_write_delay_s = options_.checkpoint_write_delay_s;
  options.write_progress = &disk_;
  options.liveness = liveness();  // node 0's writes and every other node's
  options.data_access = roots_.data_access();
  options.checkpoint_access = roots_.checkpoint_access();
  options.num_nodes = world_;
  options.steps = queued.submit.steps;
  options.resume = queued.submit.resume;
  options.trace = queued.submit.trace;
  // Pservers named by machine become node numbers before the nodes see the job.
  Status distributed = resolve_distributed(&queued.job, options_.machines);
  options.stall_timeout_s = job_stall_timeout_s(queued.job, options_.stall_timeout_s);
  options.out = options_.out;
  if (follow)
    options.on_line = [this, client, id = queued.id](const std::string& line) {
      post(Outgoing{false, client, ctl::encode(ctl::Progress{id, line})});
    };
  // Phases are numbered across attempts, so a restarted attempt's tags are
  // new and a stale message of the failed one is dropped.
  int phase = 0;
  Clock::time_point first_step{};  // of the current attempt
  Clock::time_point job_first_step{};  // of the first attempt that made one
  const Clock::time_point taken = Clock::now();
  // Each node compiles its own part of every phase's plan from the job.
  auto job_text = graph::job_to_json(queued.job);
  // The nodes each attempt runs on (all, or those that remain) and what they keep.
  Membership membership;
  options.executor = [this, id = queued.id, &phase, &job_text, &first_step, &job_first_step, &membership,
                      on_line = options.on_line](const PhasePlan& plan, const RunOptions& run) {
    RunOptions timed = run;
    const bool training = plan.compile.mode == compiler::Mode::kTrain;
    if (run.on_step)
      timed.on_step = [this, id, training, &first_step, &job_first_step, on_line, inner = run.on_step](
                          const StepMetrics& m) {
        if (first_step == Clock::time_point{}) first_step = Clock::now();
        if (job_first_step == Clock::time_point{}) job_first_step = first_step;
        if (training) board_.job_step(id, m.step, m.names, m.values);
        inner(m);
        // What the link said of the buckets (runtime/watch/bucket_sizing.h).
        if (std::string note = take_bucket_note(); !note.empty() && on_line) on_line(note);
      };
    return execute_phase(id, phase++, *job_text, plan, timed, membership);
  };
  if (!options_.metrics_dir.empty()) {
    options.metrics_file = fmt::format("{}/job-{}.jsonl", options_.metrics_dir, queued.id);
    options.node_pace = [this] {
      nlohmann::json nodes = nlohmann::json::array();
      for (const MetricsBoard::Node& n : board_.nodes())
        if (n.paced)
          nodes.push_back({{"node", n.rank}, {"steps_per_second", n.steps_per_second},
                           {"device_ms_per_step", n.device_ms_per_step}, {"slow", n.slow}});
      return nodes;
    };
    spdlog::info("job {}: metrics in {}", queued.id, options.metrics_file);
  }
  options.gather_replicas = [this, &queued, &membership, &phase,
                             stall_s = options.stall_timeout_s](int64_t steps) -> Status {
    if (membership.from_replicas && !membership.gather.empty() && membership.kept_step == steps &&
        !(gathered_ && gathered_->job == queued.id && gathered_->step == steps))
      return gather_alone(queued.id, phase++, membership, stall_s);
    return {};
  };
  options.model_in_memory = [this, &queued, gather = options.gather_replicas](int64_t steps)
      -> StatusOr<std::map<std::string, VariableValue>> {
    // Trained, and going on from the replicas: node 0 gathers them first.
    RILL_RETURN_IF_ERROR(gather(steps));
    std::map<std::string, std::vector<float>> values, state;
    if (gathered_ && gathered_->job == queued.id && gathered_->step == steps) values = gathered_->values;
    else
      RILL_RETURN_IF_ERROR(kept_.values_at(queued.id, steps, &values, &state)
                               .with_context(fmt::format("the model node 0 kept at step {}", steps)));
    std::map<std::string, VariableValue> model;
    for (const graph::Variable& v : queued.job.variables) {
      auto it = values.find(v.name);
      if (it == values.end())
        return internal_error("the model node 0 kept at step {} lacks variable '{}'", steps, v.name);
      model[v.name] = VariableValue{v.shape, std::move(it->second)};
    }
    return model;
  };
  options.on_plan = [this, &queued, &job_text, &options](int64_t steps, int64_t global_batch) {
    board_.job_started(queued.id, queued.job.name, job_text.ok() ? *job_text : queued.submit.job_text, steps,
                       global_batch);
    board_.job_plan(queued.id, plan_to_draw(queued.job, options.devices, world_, steps));
  };
  spdlog::info("job {} ('{}') submitted to a cluster of {} node(s)", queued.id, queued.job.name, world_);
  JobResult result;
  if (distributed.ok() && queued.job.distributed && queued.job.distributed->print_log) {
    auto cluster = compiler::parse_devices(options.devices, world_);
    auto layout = cluster.ok() ? compiler::pserver_layout(queued.job, *cluster) : cluster.status();
    if (layout.ok()) spdlog::info("job {} layout: {}", queued.id, compiler::describe_pserver_layout(*layout, queued.job));
  }
  if (!distributed.ok()) result.status = distributed;
  else if (job_text.ok()) result = run_with_restarts(queued, options, first_step, membership, &job_text);
  else result.status = job_text.status().with_context("sending the job to the nodes");
  if (job_first_step != Clock::time_point{})
    result.seconds_to_first_step = std::chrono::duration<double>(job_first_step - taken).count();
  if (!result.status.ok()) spdlog::error("job {} failed: {}", queued.id, result.status.message());
  board_.job_finished(queued.id, result.status.ok(), result.status.ok() ? "" : result.status.message(),
                     result.interrupted);
  {
    MutexLock lock(finished_mu_);
    finished_.push_back({queued.id, queued.job.name, result.status.ok(),
                         result.status.ok() ? result.summary : result.status.message()});
    if (finished_.size() > kFinishedShown) finished_.pop_front();
  }
  // A timeline that would not fit in the answer beside the result is left
  // out, said, rather than the answer dropped.
  if (result.trace_json.size() + 65536 > options_.max_message_bytes) {
    spdlog::warn("job {}: its trace ({} bytes) does not fit in a control message (--max-message-bytes {}): not sent",
                 queued.id, result.trace_json.size(), options_.max_message_bytes);
    result.trace_json.clear();
  }
  post(Outgoing{false, client,
                ctl::encode(ctl::Result{queued.id, result_json(result),
                                        result.status.ok() ? "" : result.status.message(), result.status.code(),
                                        std::move(result.trace_json)})});
  job_running_ = false;
  channel_->wake();  // the next queued job starts now
}

RunReport Master::execute_phase(int64_t job_id, int phase, const std::string& job_text, const PhasePlan& plan,
                               const RunOptions& run_options, const Membership& membership) {
  RunReport report;
  auto tags = run_tag_base(job_id, phase);
  if (!tags.ok()) {
    report.status = tags.status();
    return report;
  }
  const uint64_t tag_base = *tags;
  // Every node of the plan but the master's, by machine-list rank.
  std::vector<int> others;
  for (int r = 1; r < world_; ++r) others.push_back(r);
  if (!membership.members.empty()) others.assign(membership.members.begin() + 1, membership.members.end());
  const int parts = static_cast<int>(others.size());
  const bool keeping = membership.keep_steps && plan.compile.mode == compiler::Mode::kTrain;
  const int64_t kept_step = plan.compile.mode == compiler::Mode::kTrain ? membership.kept_step : -1;
  // However the phase ends, its checkpoint reports stop reaching the run's
  // completer (which the caller destroys after this returns).
  struct EndReports {
    Master* master;
    ~EndReports() { master->end_checkpoint_reports(); }
  } end_reports{this};
  if (options_.before_phase) options_.before_phase(job_id, phase);
  {
    MutexLock lock(phase_mu_);
    phase_ = PhaseState{job_id, phase, {}, {}, {}, plan.on_checkpoint};
    phase_.first_step = run_options.start_step;
    phase_.plan_steps = plan.compile.steps;
    phase_.members = others;
    phase_.members.insert(phase_.members.begin(), 0);
    phase_.keeping = keeping;
    phase_.replica_every = keeping ? membership.replica_every : 0;
    if (stopping_) {
      report.status = Status(Code::kAborted, "the cluster is shutting down");
      return report;
    }
    for (int r : others)
      if (lost_[r]) {
        phase_.lost = fmt::format("{} is lost", node_name(options_.machines, r));
        phase_.lost_ranks.push_back(r);
      }
    if (!phase_.lost.empty()) {
      report.status = Status(Code::kUnavailable, phase_.lost);
      return report;
    }
    // A node that came back after this attempt's nodes were chosen (while
    // it compiled) is up and not in it: as when one comes back mid-phase,
    // the phase ends at its first step boundary and the next takes it in.
    if (keeping && !regroup_)
      for (int r = 1; r < world_; ++r) {
        auto refused = refused_back_.find(r);
        if (lost_[r] || phase_.member(r) || (refused != refused_back_.end() && refused->second == incarnation_[r]))
          continue;
        spdlog::info("job {}: {} came back while this attempt compiled; it joins the training at the first step "
                     "boundary",
                     job_id, node_name(options_.machines, r));
        regroup_ = true;
      }
  }
  std::vector<ctl::Tensor> initial, state;
  for (const auto& [name, values] : run_options.initial_values) initial.push_back(ctl::Tensor{name, {}, {}, {}, values});
  for (const auto& [name, values] : run_options.initial_state) state.push_back(ctl::Tensor{name, {}, {}, {}, values});
  int64_t snapshot_every = run_options.on_snapshot ? run_options.snapshot_every : -1;
  // Every other node gets the same part (but for nodes that come back): the
  // job and what it starts from.
  ctl::PlanPart plan_part{job_id, phase, tag_base, job_text, plan.devices, static_cast<int>(plan.compile.mode),
                          plan.compile.steps, plan.compile.activation_register_num, std::move(initial),
                          std::move(state), run_options.start_step, snapshot_every, run_options.trace,
                          membership.members, keeping, kept_step};
  plan_part.replica_every = keeping ? membership.replica_every : 0;
  plan_part.replica_copies = membership.replica_copies;
  // Each node's own part of the checkpoint's carried state (its row of
  // each error), in a part of its own; without it one part serves all.
  std::map<int, std::string> own_parts;  // by machine rank
  const int plan_nodes = parts + 1;
  const size_t shared_state = plan_part.initial_state.size();
  if (!run_options.carried_checkpoint.empty())
    for (int i = 1; i < plan_nodes; ++i) {
      for (auto& [name, values] : carried_for_node(run_options.carried_checkpoint, i, plan_nodes))
        plan_part.initial_state.push_back(ctl::Tensor{name, {}, {}, {}, std::move(values)});
      own_parts[others[static_cast<size_t>(i - 1)]] = ctl::encode(plan_part);
      plan_part.initial_state.resize(shared_state);
    }
  const std::string part = ctl::encode(plan_part);
  size_t largest = part.size();
  for (const auto& [r, own] : own_parts) largest = std::max(largest, own.size());
  if (parts > 0 && largest > options_.max_message_bytes) {
    report.status = invalid_argument("the job with the values it starts from ({} bytes: {} variables, {} optimizer "
                                     "states) does not fit in a control message to the other nodes "
                                     "(--max-message-bytes {})",
                                     largest, plan_part.initial_values.size(), plan_part.initial_state.size(),
                                     options_.max_message_bytes);
    return report;
  }
  // Going on from the replicas: node 0 gathers the model first.
  if (!membership.gather.empty() && kept_step >= 0)
    if (Status gathered = gather_pieces(job_id, phase, tag_base, membership, run_options.stall_timeout_s);
        !gathered.ok()) {
      report.status = gathered;
      return report;
    }
  // Node 0 starts from the model it gathered, or from its own memory.
  const bool from_gathered = kept_step >= 0 && gathered_ && gathered_->step == kept_step && membership.from_replicas;
  // Nodes that come back start from the master's memory, which follows
  // their part over the data plane (memory_transfer.h).
  std::string newcomer_part;
  std::vector<std::string> memory;
  if (!membership.newcomers.empty() && kept_step >= 0) {
    auto taken = memory_messages(job_id, phase, kept_step, from_gathered);
    if (!taken.ok()) {
      report.status = taken.status();
      return report;
    }
    memory = std::move(*taken);
    plan_part.kept_step = -1;
    for (const std::string& m : memory) plan_part.memory_parts.push_back(m.size());
    newcomer_part = ctl::encode(plan_part);
    // Open now: a newcomer says it is ready as soon as its part comes.
    transport_->accept_tags(tag_base, tag_base + kTagsPerRun);
  }
  for (int r : others) {
    const bool newcomer =
        std::find(membership.newcomers.begin(), membership.newcomers.end(), r) != membership.newcomers.end();
    auto own = own_parts.find(r);
    post(Outgoing{false, "", newcomer && !newcomer_part.empty() ? newcomer_part
                             : own != own_parts.end()            ? std::move(own->second)
                                                                 : part,
                  r});
  }
  auto abort_all = [&](const std::string& reason) {
    for (int r : others) post_to_node(r, ctl::Abort{job_id, phase, reason});
  };
  if (Status sent = send_memory_to(membership.newcomers, tag_base, memory, run_options.stall_timeout_s); !sent.ok()) {
    abort_all(sent.message());
    report.status = sent;
    return report;
  }
  memory = {};  // the phase may run long: not held meanwhile
  RunOptions local = run_options;
  local.tag_base = tag_base;
  for (auto& [name, values] : carried_for_node(run_options.carried_checkpoint, 0, plan_nodes))
    local.initial_state[name] = std::move(values);
  // Until the phase has run, each node holds the step it starts from (its
  // memory is replaced only as the run steps past it); a node that starts
  // from anything else (a checkpoint, the start) is not known to hold one.
  if (keeping) {
    MutexLock lock(phase_mu_);
    for (int r = 0; r < world_; ++r) {
      const bool holder = membership.member(r) && std::find(membership.newcomers.begin(), membership.newcomers.end(),
                                                            r) == membership.newcomers.end();
      // Whole or not as it said when it last ended (a layout that splits
      // variables goes on from memory only with the plan it ran).
      auto before = kept_by_node_.find(r);
      const bool whole = before == kept_by_node_.end() || before->second.whole;
      if (kept_step >= 0 && holder) kept_by_node_[r] = KeptSteps{kept_step, kept_step, whole, incarnation_[r]};
      else kept_by_node_.erase(r);
    }
  }
  int nodes = 0;
  if (from_gathered) local.initial_values = gathered_->values, local.initial_state = gathered_->state;
  Status placed = place_run(job_id, membership.members, keeping, from_gathered ? -1 : kept_step, run_options.start_step,
                            membership.variables, local, &nodes);
  std::unique_ptr<Replicator> replicator;  // reset once the runtime's run() returned: it tells it nothing after
  int replica_pieces = 0;
  if (placed.ok() && keeping) {
    auto made = replicate(job_id, phase, membership.members, membership.replica_every, membership.replica_copies,
                          plan.plan, local, nodes, membership.shapes, run_options.start_step + plan.compile.steps,
                          &replica_pieces);
    if (made.ok()) replicator = std::move(*made);
    else placed = made.status();
  }
  auto runtime = placed.ok() ? NodeRuntime::build(plan.plan, local) : StatusOr<std::unique_ptr<NodeRuntime>>(placed);
  // Every node must have built its actors before any starts.
  std::string failure;
  Code code = Code::kAborted;
  // The nodes with no entry in `replies`, named.
  auto silent = [this, &others](const auto& replies) {
    std::string names;
    for (int r : others)
      if (replies.count(r) == 0) names += (names.empty() ? "" : ", ") + node_name(options_.machines, r);
    return names;
  };
  {
    MutexLock lock(phase_mu_);
    const auto deadline = now() + seconds_of(options_.join_timeout_s);
    bool acked = true;
    while (acked && static_cast<int>(phase_.acks.size()) < parts && phase_.lost.empty())
      acked = wait_phase_until(deadline);
    acked = static_cast<int>(phase_.acks.size()) == parts || !phase_.lost.empty();
    if (!runtime.ok()) {
      failure = fmt::format("{}: {}", node_name(options_.machines, 0), runtime.status().message());
      code = runtime.status().code();
    }
    for (const auto& [node, ack] : phase_.acks)
      if (failure.empty() && !ack.error.empty()) failure = ack.error, code = ack.code == Code::kOk ? Code::kAborted : ack.code;
    if (failure.empty() && !phase_.lost.empty()) failure = phase_.lost, code = Code::kUnavailable;
    if (failure.empty() && !acked)
      failure = fmt::format("{} did not report its part of the plan built within {} s", silent(phase_.acks),
                            options_.join_timeout_s),
      code = Code::kDeadlineExceeded;
    if (failure.empty() && stopping_) failure = "the cluster is shutting down";
    // Each node's carried state in checkpoints, by the plan's node it is.
    for (size_t i = 1; failure.empty() && plan.expect_carried && i < phase_.members.size(); ++i) {
      auto ack = phase_.acks.find(phase_.members[i]);
      if (ack == phase_.acks.end()) continue;
      std::vector<std::pair<std::string, std::vector<int64_t>>> pieces;
      for (ctl::CheckpointPiece& p : ack->second.carried) pieces.emplace_back(std::move(p.tensor), std::move(p.offset));
      if (Status expected = plan.expect_carried(static_cast<int>(i), pieces); !expected.ok())
        failure = fmt::format("{}: {}", node_name(options_.machines, phase_.members[i]), expected.message()),
        code = expected.code();
    }
    if (failure.empty()) local_runtime_ = runtime->get();
  }
  if (!failure.empty()) {
    abort_all(failure);
    report.status = Status(code, failure);
    return report;
  }
  transport_->reset();
  const int64_t control_before = control_bytes_from_nodes_.load();
  for (int r : others) post_to_node(r, ctl::Start{job_id, phase});
  if (stop_job_ || (regroup_ && keeping)) {  // asked for before the phase ran
    MutexLock lock(phase_mu_);
    begin_stop_locked();
  }
  report = (*runtime)->run();
  // What the nodes were writing as this run stopped (the wait for their
  // Dones below lets their writes end).
  const bool own_failed = !report.status.ok();
  const std::string writing = own_failed ? checkpoints_being_written() : "";
  // Its last step's copies are in place when the run ended well (a loss
  // after the training goes on from them); other copies under way end with
  // the run. Its own pieces are stored as it goes (what node 0 reports below).
  if (replicator && report.status.ok() && report.whole_plan) replicator->finish(report.steps);
  replicator.reset();
  std::vector<int64_t> master_received = transport_->received_from();
  std::vector<int64_t> master_received_bytes = transport_->received_bytes_from();
  {
    MutexLock lock(phase_mu_);
    local_runtime_ = nullptr;
  }
  if (!report.status.ok()) abort_all(report.status.message());
  // Wait for every node's end; the first failure (theirs or ours) is the cause.
  MutexLock lock(phase_mu_);
  // As long as the job lets a node go without a word (its rpc_deadline),
  // and more where a node waits for its last step's copies (its copy to
  // each of its buddies in turn, then the nodes before's copies, each
  // within that patience); longer while checkpoint files are still being
  // written.
  const double done_within =
      run_options.stall_timeout_s * (keeping && membership.replica_every > 0 ? 1 + membership.replica_copies : 1) + 5;
  const bool all = wait_for_dones_locked(done_within, keeping);
  report.control_bytes_from_nodes = control_bytes_from_nodes_.load() - control_before;
  if (keeping) {
    // The phase ran: what each node holds now is what its Done says; a node
    // that said nothing holds nothing known.
    auto kept = [](const ctl::Done& done, int64_t incarnation) {
      KeptSteps out{done.kept_first, done.kept_last, done.kept_whole, incarnation, done.replica_own, {}};
      for (const ctl::Done::Replica& r : done.replicas) out.replicas[r.source] = r.steps;
      return out;
    };
    ctl::Done own;
    own.job_id = job_id;
    tell_kept(own);
    kept_by_node_[0] = kept(own, 0);
    replica_pieces_.clear();
    replica_pieces_[0] = replica_pieces;
    replica_ring_ = phase_.members;  // whose Dones these are: the ring their replicas went around
    for (int r : others) {
      if (auto ack = phase_.acks.find(r); ack != phase_.acks.end()) replica_pieces_[r] = ack->second.replica_pieces;
      auto done = phase_.dones.find(r);
      if (done == phase_.dones.end()) kept_by_node_.erase(r);
      else kept_by_node_[r] = kept(done->second, incarnation_[r]);
    }
  }
  report.traffic.assign(world_, std::vector<int64_t>(world_, 0));
  report.traffic_bytes.assign(world_, std::vector<int64_t>(world_, 0));
  for (int from = 0; from < world_; ++from) {
    report.traffic[from][0] = master_received[from];
    report.traffic_bytes[from][0] = master_received_bytes[from];
  }
  for (auto& [node, done] : phase_.dones) {
    for (int from = 0; from < world_ && from < static_cast<int>(done.received_from.size()); ++from)
      report.traffic[from][node] = done.received_from[from];
    for (int from = 0; from < world_ && from < static_cast<int>(done.received_bytes_from.size()); ++from)
      report.traffic_bytes[from][node] = done.received_bytes_from[from];
    if (!done.error.empty()) {
      // A node's own failure, with its code (restarts decide by it), takes
      // the place of ours when ours only followed from it (an abort).
      if (report.status.ok() || report.status.code() == Code::kAborted)
        report.status = ctl::node_error(done.code, node_name(options_.machines, node), done.error);
      continue;
    }
    for (ctl::ActTrace& t : done.traces)
      // Every act has its end (and, where any, its done): a record that
      // does not is not a node's, and is dropped.
      if (t.end_ns.size() == t.begin_ns.size() && (t.done_ns.empty() || t.done_ns.size() == t.begin_ns.size()))
        report.traces.push_back(ActorTraceRecord{t.id, std::move(t.name),
                                               ActTrace{std::move(t.begin_ns), std::move(t.end_ns), std::move(t.done_ns)},
                                               t.acts_per_step, std::move(t.collective)});
    for (ctl::Tensor& t : done.variables) {
      // A node's word on its pieces is checked before node 0 makes a tensor of it.
      auto known = membership.shapes.find(t.name);
      Status fits = piece_fits(t, known == membership.shapes.end() ? nullptr : &known->second);
      auto held = report.variables.find(t.name);
      if (fits.ok() && held != report.variables.end() && !held->second.values.empty() && held->second.shape != t.shape)
        fits = data_loss("pieces of '{}' disagree on its shape", printable_name(t.name));
      if (!fits.ok()) {
        if (report.status.ok()) report.status = fits.with_context(node_name(options_.machines, node));
        continue;
      }
      VariableValue& value = report.variables[t.name];
      place_piece(t.shape, t.offset, t.piece_shape, t.values, &value.shape, &value.values);
    }
  }
  // A lost node is the first cause: the errors it caused elsewhere (a
  // collective that lost its peer, an abort) are its consequences.
  if (!phase_.lost.empty()) report.status = Status(Code::kUnavailable, phase_.lost);
  if (report.status.ok() && !all)
    report.status = Status(Code::kDeadlineExceeded,
                           fmt::format("{} did not report the end of the run within {} s of the master's, or of "
                                       "the last checkpoint bytes written",
                                       silent(phase_.dones), done_within));
  if (!report.status.ok()) {
    // Which node the others' collectives waited for, from every node's
    // flight record (the plan's nodes: phase_.members maps them to ranks).
    std::map<int, std::string> records;
    for (size_t i = 0; i < phase_.members.size(); ++i) {
      const int rank = phase_.members[i];
      if (rank == 0) records[static_cast<int>(i)] = report.comm_record;
      else if (auto done = phase_.dones.find(rank); done != phase_.dones.end() && !done->second.comm.empty())
        records[static_cast<int>(i)] = done->second.comm;
    }
    const std::vector<int> members = phase_.members;
    const std::string waits = explain_waits(records, [this, &members](int plan_node) {
      return plan_node >= 0 && plan_node < static_cast<int>(members.size())
                 ? node_name(options_.machines, members[static_cast<size_t>(plan_node)])
                 : fmt::format("plan node {}", plan_node);
    });
    if (!waits.empty()) report.status = Status(report.status.code(), report.status.message() + "; " + waits);
    if (report.status.code() == Code::kDeadlineExceeded)
      report.status = Status(report.status.code(),
                             report.status.message() + (own_failed ? writing : checkpoints_being_written()));
  }
  return report;
}

std::string Master::checkpoints_being_written() {
  std::string out;
  if (const std::string own = disk_.describe(); !own.empty())
    out += fmt::format("; {} was writing {}", node_name(options_.machines, 0), own);
  MutexLock lock(disk_mu_);
  for (int r = 1; r < static_cast<int>(disk_heard_.size()); ++r)
    if (disk_heard_[static_cast<size_t>(r)].step >= 0)
      out += fmt::format("; {} was writing its checkpoint of step {}", node_name(options_.machines, r),
                         disk_heard_[static_cast<size_t>(r)].step);
  return out;
}

}  // namespace rill::agent_internal
