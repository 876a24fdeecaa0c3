// Client: talks to a cluster's master agent. Submits a job (a job file's
// text, or a graph::Job built with rill::JobBuilder) and waits for its result,
// optionally streaming the master's progress lines; asks for the cluster's
// status; shuts the cluster down. One Client per thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "graph/job.h"

namespace rill {

struct SubmitOptions {
  std::string devices;                 // empty: the agents' devices
  int64_t steps = 0;                   // > 0 overrides the job's steps
  std::vector<std::string> overrides;  // section.field=value
  std::string resume;                  // checkpoint folder, root, or "latest"
  // Runs the job again, from its newest checkpoint (or its start), when a
  // node is lost, once the node's agent is back: up to this many times.
  int max_restarts = 0;
  // Live membership: a data-parallel job that loses a node goes on from the
  // other nodes' memory while at least this many remain (0: every node).
  int min_nodes = 0;
  // With min_nodes: each node's pieces go to the next node's memory every
  // this many steps, so a layout that splits variables across nodes goes on
  // without a lost node too (-1: every 10 steps for such layouts, none for
  // data parallelism; 0: never).
  int64_t replica_every = -1;
  // With replicas: each node's pieces go to this many next nodes, so that a
  // job goes on after losing up to this many nodes at once (0: 1).
  int replica_copies = 0;
  // Every node records its acts; the result comes with the training's
  // timeline (SubmitResult::trace_json).
  bool trace = false;
  std::function<void(const std::string& line)> on_line;  // progress lines, when set
  double timeout_s = 3600.0;           // for the whole job
  // Interrupts so far (Ctrl-C; runtime/cli/interrupts.h), read while the job
  // runs: at the first the master is asked to stop the job at the next step
  // boundary (with its last checkpoint there), at the second at once.
  const std::atomic<int>* interrupts = nullptr;
};

struct SubmitResult {
  int64_t job_id = 0;
  std::string result_json;             // the same JSON as `rill run --result`
  // With SubmitOptions::trace: Chrome-trace JSON of every node's acts, one
  // process per node, each node's times from its own first act.
  std::string trace_json;
  Status status;                       // the job's own status, with the code of the node's error that ended it
};

class Client {
 public:
  // `master` is "address[:ctrl_port]" (default port 9988). Connecting never
  // blocks; the first request fails with a clear error if nobody answers,
  // or the master refuses the handshake (kPermissionDenied). With `running`
  // (rill submit, rill status: the master should be up already) a first
  // connection refused (nothing listens there) or without a route for
  // `refused_grace_s` is an error (kUnavailable; rill submit waits 3 s for
  // an agent started just before it, rill status none); without it
  // (a master still starting, as under rill launch) it is tried again until
  // the answer timeout. The cluster key is the file $RILL_KEY_FILE names, if
  // set (`rill ... --key` sets it).
  // `key_file`, when given, is the key instead (a client or cluster key
  // file; the Python module's Client(key=...)).
  static StatusOr<std::unique_ptr<Client>> connect(const std::string& master, double answer_timeout_s = 10.0,
                                                   bool running = false, double refused_grace_s = 3.0,
                                                   const std::string& key_file = "");
  virtual ~Client() = default;

  // Submits job file text; `file_name` names it in error messages.
  virtual StatusOr<SubmitResult> submit_text(const std::string& job_text, const std::string& file_name,
                                             const SubmitOptions& options) = 0;
  // Submits a job built in C++ (sent as its job-file JSON).
  virtual StatusOr<SubmitResult> submit(const graph::Job& job, const SubmitOptions& options) = 0;
  // The cluster as JSON: nodes, devices, state, running and queued jobs.
  virtual StatusOr<std::string> status() = 0;
  // Asks the master to stop job `job_id` (0: the running one) at the next
  // step boundary on every node, with its last checkpoint there (`now`: at
  // once). What the master did, as a line ("nothing to stop" when no job
  // runs); an error (kNotFound) when job `job_id` is not the running one.
  virtual StatusOr<std::string> stop(int64_t job_id, bool now) = 0;
  // Stops every agent of the cluster.
  virtual Status shutdown() = 0;
};

}  // namespace rill
