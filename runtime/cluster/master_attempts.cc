// A job's attempts on the master: run again from its newest checkpoint
// after a restartable failure (--max-restarts), or, under live membership
// (--min-nodes), go on from the nodes' memory without a lost node and take
// it back when it returns (docs/CLUSTER.md).
#include "runtime/cluster/master.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "graph/job_file.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/cluster/job_runner.h"
#include "runtime/cluster/memory_pieces.h"

namespace rill::agent_internal {

namespace {

// Failures a restart can cure: a lost node, a corrupted or lost message, a
// stall. A job's own errors (a bad shape, a missing file) would fail again.
bool restartable(const Status& status) {
  return status.code() == Code::kUnavailable || status.code() == Code::kDataLoss ||
         status.code() == Code::kDeadlineExceeded;
}

// Whether a job's layout splits its variables across nodes by design:
// pipeline stages, parameter servers, ZeRO, placements of their own.
bool splits_variables(const graph::Job& job) {
  if (job.pipeline || job.pserver_mode() || job.train.zero || !job.groups.empty()) return true;
  return std::any_of(job.variables.begin(), job.variables.end(),
                     [](const graph::Variable& v) { return v.placement.has_value(); });
}

// A step's gradient bytes: every trainable variable's, in f32.
int64_t gradient_bytes(const graph::Job& job) {
  int64_t bytes = 0;
  for (const graph::Variable& v : job.variables)
    if (v.trainable) bytes += num_elements(v.shape) * static_cast<int64_t>(sizeof(float));
  return bytes;
}

// The attempt that went on from memory with other buckets ran from `from`:
// the run's result covers both (its losses from the first attempt's start).
void join_results(const JobResult& before, int64_t from, JobResult* after) {
  std::vector<double> losses(before.loss_curve.begin(),
                             before.loss_curve.begin() +
                                 std::clamp<int64_t>(from - before.start_step, 0,
                                                     static_cast<int64_t>(before.loss_curve.size())));
  losses.insert(losses.end(), after->loss_curve.begin(), after->loss_curve.end());
  after->loss_curve = std::move(losses);
  after->start_step = before.start_step;
  after->train_seconds += before.train_seconds;
  if (after->train_seconds > 0)
    after->samples_per_sec =
        static_cast<double>(after->steps - after->start_step) * static_cast<double>(after->global_batch) /
        after->train_seconds;
  after->seconds_to_first_step = before.seconds_to_first_step;
  after->checkpoints.insert(after->checkpoints.begin(), before.checkpoints.begin(), before.checkpoints.end());
  after->checkpoints_written = static_cast<int64_t>(after->checkpoints.size());
  // An attempt that ran no step (what follows a finished training) keeps
  // the training's figures.
  if (!after->loss_curve.empty()) after->final_loss = after->loss_curve.back();
  if (after->train_metrics.empty()) after->train_metrics = before.train_metrics;
  if (after->steady_samples_per_sec == 0) after->steady_samples_per_sec = before.steady_samples_per_sec;
}

// train.buckets_by_link's decision as the result reports it: what the run
// used (a size chosen but never taken, the run having ended or failed
// before the step boundary, is reported as not taken).
void report_buckets(const std::optional<BucketChoice>& choice, bool sizing, bool resized, int64_t resized_from,
                    int64_t job_bytes, JobResult* result) {
  if (choice) {
    const bool taken = !choice->resize || resized || result->regrouped;
    result->buckets.bytes = taken ? choice->bytes : job_bytes;
    result->buckets.reason = taken ? choice->reason
                                   : fmt::format("{} chosen ({}), but the run ended before it took effect",
                                                 format_bucket_bytes(choice->bytes), choice->reason);
    result->buckets.from_step = resized ? resized_from : -1;
  } else if (sizing) {
    result->buckets.bytes = job_bytes;
    result->buckets.reason = "not measured: the training ended before every node's pace and links were known";
  }
}

}  // namespace

JobResult Master::run_with_restarts(const QueuedJob& queued, JobRunOptions options, Clock::time_point& first_step,
                                    Membership& membership, StatusOr<std::string>* job_text) {
  auto say = [&](const std::string& line) {
    spdlog::warn("job {}: {}", queued.id, line);
    if (options.on_line) options.on_line(line);
  };
  const int max_restarts = std::max(0, queued.submit.max_restarts);
  // Live membership: every node keeps its last two steps in memory, and a
  // lost node's job goes on without it while min_nodes remain.
  const int min_nodes = queued.submit.min_nodes;
  const bool live = min_nodes > 0 && min_nodes < world_;
  Membership everyone;
  for (int r = 0; r < world_; ++r) everyone.members.push_back(r);
  everyone.keep_steps = live;
  // A layout that splits variables copies each node's pieces to the next
  // every few steps (by default every kReplicaEvery), so that it too goes
  // on without a lost node; data parallelism needs none (every node holds
  // the model).
  const int64_t asked = queued.submit.replica_every;
  everyone.replica_every = !live ? 0 : asked >= 0 ? asked : splits_variables(queued.job) ? kReplicaEvery : 0;
  everyone.replica_copies = std::max(queued.submit.replica_copies, 1);
  if (live && everyone.replica_every == 0 && queued.submit.replica_copies > 1)
    say(fmt::format("--replica-copies {}: this job copies no replicas (every node holds the whole model, or "
                    "--replica-every 0)",
                    queued.submit.replica_copies));
  for (const graph::Variable& v : queued.job.variables) everyone.variables.push_back(v.name);
  everyone.shapes = model_shapes(queued.job);
  // Buckets sized by the link: until the size is chosen the nodes keep
  // their steps, so the run can go on from memory with another plan.
  bool sizing_buckets = false;
  {
    MutexLock lock(phase_mu_);
    buckets_ = BucketPlan{};
    buckets_.armed = sizing_buckets = queued.job.train.buckets_by_link && world_ > 1;
    buckets_.sizing.gradient_bytes = gradient_bytes(queued.job);
    buckets_.sizing.current_bytes = queued.job.train.bucket_bytes;
  }
  (void)take_bucket_note();  // an earlier job's, decided after its last step
  BucketRun resized;  // the job with the buckets the link chose, once it goes on with them
  // The attempt whose training was done when a node was lost: the next runs
  // only what follows training, and the result joins the two.
  std::optional<JobResult> trained;
  membership = everyone;
  membership.keep_steps = live || sizing_buckets;
  if (live) start_on_nodes_up(queued.job, membership, options, min_nodes, say);
  kept_by_node_.clear();  // another job's
  replica_pieces_.clear();
  replica_ring_.clear();
  gathered_.reset();
  {
    MutexLock lock(phase_mu_);
    refused_back_.clear();
  }
  std::vector<JobRestart> restarts;
  std::vector<std::pair<int64_t, int>> nodes_from_step;
  Clock::time_point whole_at{};
  // Membership changes in a row that ran no step: a node that fails as it
  // starts, again and again, ends the job rather than cycling for ever.
  int idle_changes = 0;
  const int max_idle_changes = world_ + max_restarts;
  // The step of the model node 0 gathered from the replicas for the next
  // restart of every node (a layout that could not run on fewer), else -1.
  int64_t restart_at = -1;
  for (int attempt = 0;;) {
    first_step = Clock::time_point{};
    {
      MutexLock lock(finished_mu_);
      running_members_ = membership.members;
    }
    JobResult result = run_job(resized.job ? *resized.job : queued.job, options);
    // The attempt that went on with other buckets continues the one before:
    // one result, no new entry of nodes or restart.
    const bool joined = resized.before && result.start_step == resized.from;
    if (joined) join_results(*resized.before, resized.from, &result);
    resized.before.reset();  // a later attempt (from disk, or other nodes) is the result's own
    if (!joined && !trained)
      nodes_from_step.emplace_back(result.start_step, static_cast<int>(membership.members.size()));
    if (!restarts.empty() && !joined) {
      restarts.back().resumed_from_step = result.start_step;
      if (first_step != Clock::time_point{})
        restarts.back().seconds_to_first_step = std::chrono::duration<double>(first_step - whole_at).count();
    }
    if (trained) join_results(*trained, trained->steps, &result);
    trained.reset();
    std::optional<BucketChoice> bucket_choice;
    {
      MutexLock lock(phase_mu_);
      bucket_choice = buckets_.choice;
    }
    report_buckets(bucket_choice, sizing_buckets, resized.job.has_value(), resized.from,
                   queued.job.train.bucket_bytes, &result);
    if (result.regrouped && bucket_choice && bucket_choice->resize && !resized.job &&
        go_on_with_buckets(queued, *bucket_choice, live, result, membership, options, resized, job_text))
      continue;
    // A layout that cannot run on the nodes that remain (stages placed on
    // named nodes) fails to build there: the job restarts once every node
    // is up (--max-restarts), from disk, or, with replicas, from the model
    // node 0 gathers into its memory from them now, while the survivors
    // hold them; that restart alone goes on from it (`restart_at`).
    bool cannot_shrink = false;
    if (live && !result.status.ok() && !restartable(result.status) && !restarts.empty() &&
        restarts.back().from_memory && result.loss_curve.empty() &&
        static_cast<int>(membership.members.size()) < world_) {
      const std::string why = fmt::format("the job cannot run on the {} node(s) that remain: {}",
                                          membership.members.size(), result.status.message());
      say(why);
      const bool shutting_down = result.status.code() == Code::kAborted;
      result.status = Status(Code::kUnavailable, fmt::format("{}; {}", restarts.back().error, why));
      cannot_shrink = true;
      if (membership.from_replicas && membership.kept_step >= 0 && attempt < max_restarts && !shutting_down &&
          options.gather_replicas) {
        if (Status held = options.gather_replicas(membership.kept_step); !held.ok())
          say(fmt::format("node 0 could not gather the model of step {} from the replicas: {}; the restart goes on "
                          "from disk",
                          membership.kept_step, held.message()));
        else if (gathered_ && gathered_->job == queued.id && gathered_->step == membership.kept_step)
          restart_at = membership.kept_step;
      }
    }
    if (result.status.ok() || !restartable(result.status)) {
      result.restarts = std::move(restarts);
      result.nodes_from_step = std::move(nodes_from_step);
      return result;
    }
    const auto failed_at = Clock::now();
    JobRestart restart;
    restart.error = result.status.message();
    restart.failed_at_step = result.start_step + static_cast<int64_t>(result.loss_curve.size());
    const bool progressed = (result.regrouped ? result.steps : restart.failed_at_step) > result.start_step;
    idle_changes = progressed ? 0 : idle_changes + 1;
    if (live && idle_changes > max_idle_changes)
      say(fmt::format("{} changes of nodes in a row ran no step: not going on from memory again",
                      idle_changes));
    if (live && idle_changes <= max_idle_changes && !cannot_shrink) {
      // A node that comes back from now on is taken back by the next attempt.
      regroup_ = false;
      // What follows a finished training reads node 0's memory, which
      // gathers the replicas first (options.model_in_memory).
      StatusOr<Membership> next = next_membership(membership, result.regrouped ? result.steps : -1, min_nodes);
      if (next.ok()) {
        std::string back;  // the nodes that start from node 0's memory, but those that ran (from replicas)
        for (int r : next->newcomers)
          if (!next->from_replicas || !membership.member(r))
            back += (back.empty() ? "" : ", ") + node_name(options_.machines, r);
        if (result.regrouped && next->from_replicas) {
          restart.error = fmt::format("{} joined again", back);
          restart.failed_at_step = result.steps;
          say(fmt::format("{} back: going on from step {} on {} node(s), from the replicas in memory: node 0 gathers "
                          "the model, the others start from node 0's memory",
                          back, next->kept_step, next->members.size()));
        } else if (result.regrouped) {
          restart.error = fmt::format("{} joined again", back);
          restart.failed_at_step = result.steps;
          say(fmt::format("{} back: going on from step {} on {} node(s), the others from their own memory, {} "
                          "from node 0's",
                          back, next->kept_step, next->members.size(), next->newcomers.size() == 1 ? "it" : "they"));
        } else if (result.planned_steps > 0 && next->kept_step >= result.planned_steps) {
          say(fmt::format("failed at step {}: {}; training done at step {}: {} on the {} node(s) that remain, with "
                          "the model in node 0's memory",
                          restart.failed_at_step, restart.error, next->kept_step,
                          queued.job.eval ? "the eval runs" : "the job ends", next->members.size()));
          result.steps = next->kept_step;
          trained = result;
        } else if (next->from_replicas) {
          say(fmt::format("failed at step {}: {}; going on from step {} on the {} node(s) that remain, from the "
                          "replicas in memory: node 0 gathers the model, the others start from node 0's memory",
                          restart.failed_at_step, restart.error, next->kept_step, next->members.size()));
        } else if (back.empty()) {
          say(fmt::format("failed at step {}: {}; going on from step {} on the {} node(s) that remain, each from its "
                          "own memory",
                          restart.failed_at_step, restart.error, next->kept_step, next->members.size()));
        } else {
          say(fmt::format("failed at step {}: {}; going on from step {} on {} node(s), {} from node 0's memory, the "
                          "others from their own",
                          restart.failed_at_step, restart.error, next->kept_step, next->members.size(), back));
        }
        restart.from_memory = true;
        restart.nodes = static_cast<int>(next->members.size());
        whole_at = failed_at;
        membership = std::move(*next);
        options.num_nodes = restart.nodes;
        options.start_from_memory = membership.kept_step;
        options.resume.clear();
        restarts.push_back(std::move(restart));
        board_.job_restarted(queued.id);
        continue;
      }
      if (result.regrouped && next.status().code() == Code::kFailedPrecondition && !membership.members.empty()) {
        // The node that came back cannot be taken (its layout splits
        // variables across nodes): the nodes that ran go on as they were,
        // each from its own memory, with the plan they had.
        say(fmt::format("cannot take back the node that came back ({}): going on from step {} on the {} node(s) "
                        "that ran it",
                        next.status().message(), result.steps, membership.members.size()));
        {
          MutexLock lock(phase_mu_);
          for (int r = 0; r < world_; ++r)
            if (!lost_[r] && !membership.member(r)) refused_back_[r] = incarnation_[r];
        }
        restart.error = fmt::format("a node joined again and could not be taken back: {}", next.status().message());
        restart.failed_at_step = result.steps;
        restart.from_memory = true;
        restart.nodes = static_cast<int>(membership.members.size());
        membership.kept_step = result.steps;
        membership.newcomers.clear();
        membership.gather.clear();
        options.start_from_memory = result.steps;
        options.resume.clear();
        whole_at = failed_at;
        restarts.push_back(std::move(restart));
        board_.job_restarted(queued.id);
        continue;
      }
      if (next.status().code() != Code::kNotFound)
        say(fmt::format("cannot go on {}: {}",
                        result.regrouped ? "with the node that came back" : "without the lost node",
                        next.status().message()));
      if (result.regrouped) {  // the nodes that ran hold their state still: a restart from disk would lose it
        result.status = next.status();
        result.restarts = std::move(restarts);
        result.nodes_from_step = std::move(nodes_from_step);
        return result;
      }
    }
    if (attempt >= max_restarts) {
      result.restarts = std::move(restarts);
      result.nodes_from_step = std::move(nodes_from_step);
      return result;
    }
    ++attempt;
    say(fmt::format("failed at step {}: {}; restart {} of {} once every node is up", restart.failed_at_step,
                    restart.error, attempt, max_restarts));
    std::string missing = wait_for_whole_cluster(options_.join_timeout_s);
    if (!missing.empty()) {
      result.status = Status(result.status.code(),
                             fmt::format("{} (not restarted: {} did not come back within {} s)",
                                         result.status.message(), missing, options_.join_timeout_s));
      result.restarts = std::move(restarts);
      result.nodes_from_step = std::move(nodes_from_step);
      return result;
    }
    whole_at = Clock::now();
    restart.seconds_until_whole = std::chrono::duration<double>(whole_at - failed_at).count();
    restart.nodes = world_;
    membership = everyone;
    membership.keep_steps = live || (sizing_buckets && !bucket_choice);
    replica_ring_.clear();
    options.num_nodes = world_;
    // From the model node 0 gathered from the replicas for this restart,
    // where no checkpoint is as new: every other node starts from node 0's
    // memory.
    const int64_t held = restart_from_gathered(queued, restart_at);
    restart_at = -1;
    if (held >= 0) {
      membership.kept_step = held;
      membership.from_replicas = true;
      for (int r = 1; r < world_; ++r) membership.newcomers.push_back(r);
      options.start_from_memory = held;
      options.resume.clear();
      restart.from_memory = true;
      say(fmt::format("every node is up after {:.1f} s; restarting from step {} in node 0's memory (the model it "
                      "gathered from the replicas)",
                      restart.seconds_until_whole, held));
      restarts.push_back(std::move(restart));
      board_.job_restarted(queued.id);
      continue;
    }
    // From the newest complete checkpoint, else as first asked, on every node.
    gathered_.reset();  // another attempt's model: the restart goes on from disk
    options.start_from_memory = -1;
    options.resume = queued.submit.resume;
    if (!queued.job.checkpoint.dir.empty())
      if (auto latest = latest_checkpoint(queued.job.checkpoint.dir, roots_.checkpoint_access()); latest.ok()) options.resume = *latest;
    say(fmt::format("every node is up after {:.1f} s; restarting from {}", restart.seconds_until_whole,
                    options.resume.empty() ? std::string("the start") : options.resume));
    restarts.push_back(std::move(restart));
    board_.job_restarted(queued.id);
  }
}

// A live job submitted while nodes are down starts on the nodes up, at
// least min_nodes of them with node 0, and takes the others back at a step
// boundary when their agents come back, as it would after losing them. Not
// a layout that splits its variables across nodes by design (pipeline
// stages, parameter servers, ZeRO, placements of their own): it waits for
// every node as before.
void Master::start_on_nodes_up(const graph::Job& job, Membership& membership, JobRunOptions& options, int min_nodes,
                               const std::function<void(const std::string&)>& say) {
  if (splits_variables(job)) return;
  std::vector<int> up;
  std::string down;
  {
    MutexLock lock(phase_mu_);
    for (int r = 0; r < world_; ++r)
      if (!lost_[r]) up.push_back(r);
      else down += (down.empty() ? "" : ", ") + node_name(options_.machines, r);
  }
  if (down.empty() || static_cast<int>(up.size()) < min_nodes || up.front() != 0) return;
  say(fmt::format("{} down: starting on the {} node(s) up; a node that comes back joins at a step boundary", down,
                  up.size()));
  membership.members = std::move(up);
  options.num_nodes = static_cast<int>(membership.members.size());
}

bool Master::go_on_with_buckets(const QueuedJob& queued, const BucketChoice& choice, bool live, JobResult& result,
                                Membership& membership, JobRunOptions& options, BucketRun& run,
                                StatusOr<std::string>* job_text) {
  regroup_ = false;
  StatusOr<Membership> next = next_membership(membership, result.steps, static_cast<int>(membership.members.size()));
  if (!next.ok()) {
    // A node lost as the phase ended: as any lost node, a restart (or,
    // live, the nodes that remain) takes it from here.
    result.status = Status(Code::kUnavailable, fmt::format("cannot go on from step {} with {} buckets: {}",
                                                           result.steps, format_bucket_bytes(choice.bytes),
                                                           next.status().message()));
    return false;
  }
  graph::Job job = queued.job;
  job.train.bucket_bytes = choice.bytes;
  *job_text = graph::job_to_json(job);
  if (!job_text->ok()) {
    result.status = job_text->status().with_context("the job with other buckets");
    return false;
  }
  std::string back;  // a node that came back meanwhile (live membership) starts from node 0's memory
  for (int r : next->newcomers) back += (back.empty() ? "" : ", ") + node_name(options_.machines, r);
  const std::string line = fmt::format("going on from step {} with {} buckets on {} node(s), {}", next->kept_step,
                                       format_bucket_bytes(choice.bytes), next->members.size(),
                                       next->from_replicas ? "from node 0's gather of every node's pieces"
                                       : back.empty()      ? "each from its own memory"
                                                           : back + " from node 0's memory");
  spdlog::warn("job {}: {}", queued.id, line);
  if (options.on_line) options.on_line(line);
  run.job = std::move(job);
  run.from = next->kept_step;
  result.buckets.from_step = run.from;
  result.status = Status::ok_status();
  run.before = std::move(result);
  membership = std::move(*next);
  membership.keep_steps = live;
  options.num_nodes = static_cast<int>(membership.members.size());
  options.start_from_memory = membership.kept_step;
  options.resume.clear();
  return true;
}

int64_t Master::restart_from_gathered(const QueuedJob& queued, int64_t step) const {
  if (step < 0 || !gathered_ || gathered_->job != queued.id || gathered_->step != step) return -1;
  // A complete checkpoint of that step or a later one is the start: it also
  // holds what the replicas leave out (compressed all-reduces' carried state).
  if (!queued.job.checkpoint.dir.empty()) {
    const std::vector<int64_t> steps = checkpoint_steps(queued.job.checkpoint.dir);
    if (!steps.empty() && *std::max_element(steps.begin(), steps.end()) >= step) return -1;
  }
  return step;
}

StatusOr<Membership> Master::next_membership(const Membership& ended, int64_t step, int min_nodes) {
  Membership next = ended;
  next.members.clear();
  next.newcomers.clear();
  next.gather.clear();
  next.from_replicas = false;
  bool any_lost = false;
  {
    MutexLock lock(phase_mu_);
    any_lost = !phase_.lost_ranks.empty();
    for (int r = 0; r < world_; ++r)
      if (!lost_[r]) next.members.push_back(r);
    // What a restarted agent's predecessor kept died with it.
    for (auto it = kept_by_node_.begin(); it != kept_by_node_.end();)
      it = it->second.incarnation == incarnation_[it->first] ? std::next(it) : kept_by_node_.erase(it);
  }
  if (step < 0 && !any_lost) return Status(Code::kNotFound, "no node was lost (the failure was elsewhere)");
  if (static_cast<int>(next.members.size()) < min_nodes)
    return Status(Code::kFailedPrecondition,
                  fmt::format("{} node(s) remain, fewer than --min-nodes {}", next.members.size(), min_nodes));
  // Who holds a step in memory (what each said when the attempt ended, or
  // the step it began from when it ended before running); every other node
  // up starts from node 0's memory.
  int64_t first = 0, last = std::numeric_limits<int64_t>::max();
  for (int r : next.members) {
    auto it = kept_by_node_.find(r);
    if (it == kept_by_node_.end() || it->second.first < 0) {
      if (r == 0) return Status(Code::kFailedPrecondition, "node 0 holds no step in memory");
      next.newcomers.push_back(r);
      continue;
    }
    // A layout that splits variables: from the replicas, after a loss.
    if (!it->second.whole && ended.replica_every > 0) {
      next.newcomers.clear();
      return from_replicas(ended, std::move(next), step);
    }
    if (!it->second.whole)
      return Status(Code::kFailedPrecondition,
                    fmt::format("{} does not hold every variable whole (the job's layout splits variables or their "
                                "state across nodes, so a lost node's pieces are nowhere else)",
                                node_name(options_.machines, r)));
    first = std::max(first, it->second.first);
    last = std::min(last, it->second.last);
  }
  if (step >= 0) first = std::max(first, step), last = std::min(last, step);
  if (first > last)
    return Status(Code::kFailedPrecondition,
                  fmt::format("the nodes that remain hold no step in common in memory{}",
                              step >= 0 ? fmt::format(" with step {}", step) : std::string()));
  next.kept_step = last;
  return next;
}

}  // namespace rill::agent_internal
