// The launch environment: how `rill launch` (one per node) resolves its
// settings from flags and the platform's variables, which variables it sets for
// each process it starts, and how a process reads them back (rill::env).
//
// What the numbers mean (the same as torchrun's):
//   nnodes          nodes (machines) in the run; `rill launch` runs once per node
//   nproc_per_node  processes the launcher starts on its node
//   node_rank       this node's index, 0 .. nnodes-1; node 0 is the master
//   WORLD_SIZE      processes in the whole run = nnodes * nproc_per_node
//   RANK            a process's index = node_rank * nproc_per_node + LOCAL_RANK
// Some platforms set WORLD_SIZE to the number of nodes; Rill does not, and says
// so in the error when the numbers do not fit.
//
// Precedence, field by field: flag > standard variable > Open MPI > Slurm >
// default. A flag silently replaces nothing: a variable it overrides that
// disagrees is reported in LaunchConfig::notes. Inputs not overridden by a flag
// must agree with each other, or resolution fails with an error naming both.
//
// resolve_launch_config, describe_sources and launch_environment are pure and
// may be called from any thread. The rill::env queries read the process's
// environment: any thread, but not concurrently with setenv.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "comm/rendezvous.h"
#include "runtime/cluster/cluster_config.h"

namespace rill {

inline constexpr const char* kDefaultMasterAddr = "127.0.0.1";
inline constexpr const char* kDefaultLogdir = "log";

// The flags of `rill launch`; an empty optional is a flag not given.
struct LaunchFlags {
  std::optional<int> nnodes;
  std::optional<int> node_rank;
  std::optional<int> nproc_per_node;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::optional<std::string> logdir;
  std::optional<bool> redirect;  // --redirect_stdout_and_stderr
  std::optional<std::string> device;  // --device: "cpu" or "cuda"
};

struct LaunchConfig {
  int nnodes = 1;
  int node_rank = 0;
  int nproc_per_node = 1;
  std::string master_addr = kDefaultMasterAddr;
  int master_port = kDefaultCtrlPort;
  std::string logdir = kDefaultLogdir;  // per-node log files go here; "" for none
  bool redirect = false;                // processes' stdout and stderr into logdir
  // The type of each process slot's device: "cpu", or "cuda", one GPU a
  // slot, process (local rank) i's being gpus[i]: the i-th of
  // CUDA_VISIBLE_DEVICES where that is set, else i.
  std::string device = "cpu";
  std::vector<std::string> gpus;
  // Every node's address, node 0 first, when the platform names them (Slurm's
  // node list); empty when unknown.
  std::vector<std::string> machines;
  // Field name -> where its value came from: "flag", "env MASTER_ADDR",
  // "ompi OMPI_COMM_WORLD_RANK", "slurm SLURM_PROCID", "default".
  std::map<std::string, std::string> sources;
  // Environment values that a flag overrode although they disagreed with it;
  // worth a warning in the log.
  std::vector<std::string> notes;

  int world_size() const { return nnodes * nproc_per_node; }
};

// Resolves the launcher's configuration from its flags and its environment
// (variable name -> value; empty values count as unset). Field by field, the
// first source that is set wins:
//   nproc_per_node  --nproc_per_node; 1
//   nnodes          --nnodes; NNODES; WORLD_SIZE / nproc_per_node;
//                   OMPI_COMM_WORLD_SIZE; SLURM_NTASKS; the Slurm node list's length; 1
//   node_rank       --node_rank; NODE_RANK; RANK / nproc_per_node (RANK must be
//                   the rank of the node's first process); OMPI_COMM_WORLD_RANK;
//                   SLURM_PROCID; 0
//   master_addr     --master_addr; MASTER_ADDR; the Slurm node list's first node; 127.0.0.1
//   master_port     --master_port; MASTER_PORT; 9988
//   logdir          --logdir; "log".   redirect: the flag; false
//   device          --device ("cpu" or "cuda"); "cpu". With cuda, gpus: the
//                   entries of CUDA_VISIBLE_DEVICES, else 0 .. nproc_per_node-1
//   machines        SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST, expanded; else none
// and then these must hold, or it is an error naming the sources:
//   nnodes >= 1, nproc_per_node >= 1, 0 <= node_rank < nnodes, master_port in 1..65534;
//   WORLD_SIZE, if set, equals nnodes * nproc_per_node (not checked when both are flags);
//   RANK, if set, equals node_rank * nproc_per_node (not checked with --node_rank);
//   with cuda, CUDA_VISIBLE_DEVICES (when set) names at least nproc_per_node GPUs;
//   a task rank from the environment, MPI or Slurm is a node rank only with one
//   launcher per node, so its local id (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK,
//   SLURM_LOCALID) must be 0;
//   the Slurm node list has nnodes nodes (with --nnodes, a list that does not is
//   dropped, with a note).
StatusOr<LaunchConfig> resolve_launch_config(const LaunchFlags& flags,
                                             const std::map<std::string, std::string>& environment);

// One line for the log: "nnodes=2 from slurm SLURM_NTASKS, node_rank=1 from
// slurm SLURM_PROCID, nproc_per_node=1 from default, ...".
std::string describe_sources(const LaunchConfig& config);

namespace env {

// This process's place in the run, from the variables `rill launch` sets:
// RILL_WORLD_SIZE, RILL_RANK, RILL_LOCAL_RANK, RILL_NODE_SIZE. Rill reads only
// its own names, so a platform's other meaning of WORLD_SIZE cannot mislead it.
// Unset (or empty) variables mean a single process: 1, 0, 0, 1.
struct ProcessPlace {
  int world_size = 1;  // processes in the run
  int rank = 0;        // 0 .. world_size-1
  int local_rank = 0;  // index among this node's processes
  int node_size = 1;   // nodes in the run
};

// Each variable on its own; a malformed or out-of-range value is an error
// naming the variable.
StatusOr<int> try_world_size();
StatusOr<int> try_rank();
StatusOr<int> try_local_rank();
StatusOr<int> try_node_size();
// All four, also checked against each other (rank < world_size, ...).
StatusOr<ProcessPlace> try_process_place();

// The same, returning the single-process default (with a warning in the log)
// when the variable is malformed.
int world_size();
int rank();
int local_rank();
int node_size();

// This process's collectives among the processes of its run, as
// torch.distributed's env:// gives them: its place from the RILL_* variables,
// the meeting place from MASTER_ADDR and MASTER_PORT as `rill launch` sets
// them. The agents hold MASTER_PORT and the next, so the ranks meet at
// MASTER_PORT + 2 and rank r receives on MASTER_PORT + 3 + r
// (comm/rendezvous.h). Alone (world size 1) no variable is needed. Errors
// name the variable or the rank that did not come.
StatusOr<comm::Communicator> communicator(std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace env

// The variables to set for process `local_rank` on this node (REQUIRES:
// 0 <= local_rank < config.nproc_per_node): RILL_WORLD_SIZE, RILL_RANK, RILL_LOCAL_RANK, RILL_NODE_SIZE,
// RILL_NODE_RANK, and for other libraries the standard WORLD_SIZE, RANK,
// LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT;
// RILL_DEVICE ("cpu", or "cuda:0" with cuda slots: runtime/cluster/
// device_group.h); with cuda slots, CUDA_VISIBLE_DEVICES: the process's one
// GPU (config.gpus).
std::map<std::string, std::string> launch_environment(const LaunchConfig& config, int local_rank);

// A copy of this process's environment, for resolve_launch_config.
std::map<std::string, std::string> current_environment();

}  // namespace rill
