// `rill run --nodes N`: a local cluster of N agent processes, keyed by a
// fresh key held in memory, which runs one job and shuts down. The agents
// share 127.0.0.1 (node r's control port is --ctrl-port + 2r), so their
// ranks exchange data through shared memory as one machine's do; with
// `apart` each has an address of its own (127.0.0.1, 127.0.0.2, ..., all on
// --ctrl-port) and they talk TCP, standing in for machines. Called from the
// command's main thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rill::cli {

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
  std::string logdir;      // agents' logs; empty: a fresh folder under /tmp
  double join_timeout_s = 30.0;
  double stall_timeout_s = 60.0;
  // A non-master agent that dies is started again, and the job resumes
  // from its newest checkpoint, up to this many times.
  int max_restarts = 0;
  int min_nodes = 0;  // SubmitOptions::min_nodes
  int64_t replica_every = -1;  // SubmitOptions::replica_every
  int replica_copies = 0;      // SubmitOptions::replica_copies
  // The local cluster's own fresh key (false: none, as --insecure; for
  // measuring what the encryption costs).
  bool keyed = true;
  std::string http;  // the master agent's --http (empty: its default)
  bool apart = false;  // each agent on an address of its own (above)
};

// The machine list of such a cluster (above).
std::string local_machines(int nodes, int ctrl_port, bool apart);

// The process's exit code.
int run_local_cluster(const ClusterRunArgs& args);

}  // namespace rill::cli
