// The `rill` subcommands that involve agents: `agent`, `submit`, `status`, and
// `run --nodes N` (a local cluster of N agent processes on 127.0.0.1..N).
// Each returns the process exit code. Called from main() only.
#pragma once

#include <string>
#include <vector>

#include "runtime/cluster/agent.h"
#include "runtime/cluster/client.h"
#include "runtime/cluster/env.h"

namespace rill {

struct ClusterRunArgs {
  std::string job_path;
  int nodes = 2;
  std::string devices;  // per node; empty: the job's train.devices
  int ctrl_port = 9988;
  int64_t steps = 0;
  std::vector<std::string> overrides;
  std::string resume;
  std::string result_path;
  std::string trace_path;  // every node's acts as one Chrome-trace timeline (empty: none)
  std::string logdir;   // agents' logs; empty: a fresh folder under /tmp
  double join_timeout_s = 30.0;
  double stall_timeout_s = 60.0;
  // A non-master agent that dies is started again, and the job resumes
  // from its newest checkpoint, up to this many times.
  int max_restarts = 0;
  int min_nodes = 0;  // SubmitOptions::min_nodes
  // The local cluster's own fresh key (false: none, as --insecure; for
  // measuring what the encryption costs).
  bool keyed = true;
  std::string http;  // the master agent's --http (empty: its default)
};

// `options.machines` is filled from `machines` (entries without a port get `ctrl_port`).
int agent_command(const std::string& machines, int ctrl_port, AgentOptions options);
int submit_command(const std::string& job_path, const std::string& master, const std::string& result_path,
                   const std::string& trace_path, bool follow, const SubmitOptions& options);
// With `comm`: the running job's (`job`, when >= 0) flight records only.
int status_command(const std::string& master, bool comm = false, int64_t job = -1);
// `rill stop`: the job (0: the running one) stops at a step boundary, or at once.
int stop_command(const std::string& master, int64_t job_id, bool now);
// `rill shutdown`: every agent of the cluster exits.
int shutdown_command(const std::string& master);
int run_local_cluster(const ClusterRunArgs& args);

// `rill launch`: the seed launcher's flags (and the usual environment
// variables). Starts this node's agent; given a job file, node 0 submits it;
// given a program, starts nproc_per_node copies with WORLD_SIZE, RANK,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT (and RILL_*) set.
struct LaunchArgs {
  LaunchFlags flags;
  std::string machines;  // every node's address; default: Slurm's list, or one node
  std::string target;    // a job file (.json) or a program
  std::vector<std::string> program_args;
  // This node's agent is started again when it dies, up to this many times;
  // node 0 submits its job file with as many restarts.
  int max_restarts = 0;
  std::string http;  // this node's agent's --http (the master's serves; empty: its default)
};
int launch_command(const LaunchArgs& args);

}  // namespace rill
