#include "runtime/cluster/env.h"

#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

extern char** environ;

namespace rill {
namespace {

constexpr int64_t kMaxWorldSize = 1 << 24;  // keeps every rank product within int

// Where an environment variable's value counts as coming from, for sources.
std::string label(const std::string& name) {
  if (name.starts_with("OMPI_")) return "ompi " + name;
  if (name.starts_with("SLURM_")) return "slurm " + name;
  return "env " + name;
}

// Resolves one LaunchConfig: each field takes its first available source.
class LaunchResolver {
 public:
  LaunchResolver(const LaunchFlags& flags, const std::map<std::string, std::string>& environment)
      : flags_(flags), env_(environment) {}

  StatusOr<LaunchConfig> resolve() {
    RILL_RETURN_IF_ERROR(resolve_int(&LaunchConfig::nproc_per_node, "nproc_per_node", flags_.nproc_per_node, {}, 1));
    if (c_.nproc_per_node < 1)
      return invalid_argument("nproc_per_node {} (flag) must be at least 1", c_.nproc_per_node);
    RILL_RETURN_IF_ERROR(read_nodelist());
    RILL_RETURN_IF_ERROR(resolve_nnodes());
    RILL_RETURN_IF_ERROR(resolve_node_rank());
    if (flags_.master_addr) {
      set_string(&LaunchConfig::master_addr, "master_addr", *flags_.master_addr, "flag");
      note_if_differs("MASTER_ADDR", *flags_.master_addr, "--master_addr " + *flags_.master_addr);
    } else if (const std::string* addr = var("MASTER_ADDR")) {
      set_string(&LaunchConfig::master_addr, "master_addr", *addr, label("MASTER_ADDR"));
    } else if (!nodes_.empty()) {
      set_string(&LaunchConfig::master_addr, "master_addr", nodes_.front(), label(nodelist_var_));
    } else {
      set_string(&LaunchConfig::master_addr, "master_addr", kDefaultMasterAddr, "default");
    }
    if (c_.master_addr.empty()) return invalid_argument("master_addr ({}) is empty", source("master_addr"));
    RILL_RETURN_IF_ERROR(
        resolve_int(&LaunchConfig::master_port, "master_port", flags_.master_port, {"MASTER_PORT"}, kDefaultCtrlPort));
    if (c_.master_port < 1 || c_.master_port > kMaxCtrlPort)
      return invalid_argument("master_port {} ({}) is out of range 1..{} (the data port is ctrl_port + 1)",
                              c_.master_port, source("master_port"), kMaxCtrlPort);
    set_string(&LaunchConfig::logdir, "logdir", flags_.logdir.value_or(kDefaultLogdir),
               flags_.logdir ? "flag" : "default");
    c_.redirect = flags_.redirect.value_or(false);
    c_.sources["redirect"] = flags_.redirect ? "flag" : "default";
    if (c_.redirect && c_.logdir.empty())
      return invalid_argument("--redirect_stdout_and_stderr needs a log folder (--logdir)");
    RILL_RETURN_IF_ERROR(resolve_device());
    RILL_RETURN_IF_ERROR(check());
    return std::move(c_);
  }

 private:
  const std::string* var(const std::string& name) const {
    auto it = env_.find(name);
    return it == env_.end() || it->second.empty() ? nullptr : &it->second;
  }
  StatusOr<std::optional<int>> int_var(const std::string& name) const {
    const std::string* text = var(name);
    if (!text) return std::optional<int>();
    RILL_ASSIGN_OR_RETURN(int value, parse_int(*text, label(name)));
    return std::optional<int>(value);
  }
  const std::string& source(const std::string& field) { return c_.sources[field]; }
  using IntField = int LaunchConfig::*;
  void set_string(std::string LaunchConfig::*field, const std::string& name, const std::string& value,
                  const std::string& from) {
    c_.*field = value;
    c_.sources[name] = from;
  }
  // A flag won over a set variable that says something else: worth a warning.
  void note_if_differs(const std::string& name, const std::string& flag_value, const std::string& winner) {
    const std::string* text = var(name);
    if (text && *text != flag_value) c_.notes.push_back(fmt::format("{}={} ignored: {} wins", name, *text, winner));
  }
  // Flag, else the first of `vars` that is set, else `fallback`.
  Status resolve_int(IntField field, const std::string& name, std::optional<int> flag,
                     const std::vector<std::string>& vars, int fallback) {
    if (flag) {
      for (const std::string& v : vars) note_if_differs(v, std::to_string(*flag), fmt::format("--{} {}", name, *flag));
      c_.*field = *flag;
      c_.sources[name] = "flag";
      return {};
    }
    for (const std::string& v : vars) {
      RILL_ASSIGN_OR_RETURN(std::optional<int> value, int_var(v));
      if (!value) continue;
      c_.*field = *value;
      c_.sources[name] = label(v);
      return {};
    }
    c_.*field = fallback;
    c_.sources[name] = "default";
    return {};
  }

  Status read_nodelist() {
    nodelist_var_ = var("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
    const std::string* list = var(nodelist_var_);
    if (!list) return {};
    auto nodes = expand_slurm_nodelist(*list);
    if (!nodes.ok()) return nodes.status().with_context(label(nodelist_var_));
    nodes_ = std::move(*nodes);
    return {};
  }

  Status resolve_nnodes() {
    if (flags_.nnodes || var("NNODES"))
      return resolve_int(&LaunchConfig::nnodes, "nnodes", flags_.nnodes, {"NNODES"}, 1);
    RILL_ASSIGN_OR_RETURN(std::optional<int> world, int_var("WORLD_SIZE"));
    if (world) {
      if (*world < 1 || *world % c_.nproc_per_node != 0)
        return invalid_argument(
            "WORLD_SIZE={} (env) is not a multiple of nproc_per_node {} ({}): in Rill WORLD_SIZE counts "
            "processes, nnodes * nproc_per_node, as torchrun's does; if your platform sets it to the number "
            "of nodes, pass --nnodes",
            *world, c_.nproc_per_node, source("nproc_per_node"));
      c_.nnodes = *world / c_.nproc_per_node;
      c_.sources["nnodes"] = "env WORLD_SIZE";
      return {};
    }
    RILL_RETURN_IF_ERROR(
        resolve_int(&LaunchConfig::nnodes, "nnodes", std::nullopt, {"OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, 1));
    if (source("nnodes") == "default" && !nodes_.empty()) {
      c_.nnodes = static_cast<int>(nodes_.size());
      c_.sources["nnodes"] = label(nodelist_var_);
    }
    return {};
  }

  // A task rank (RANK, MPI's, Slurm's) is a node rank only if this task is the
  // first on its node: more than one launcher per node would start every
  // process twice.
  Status check_first_on_node(const std::string& local_var, const std::string& hint) {
    RILL_ASSIGN_OR_RETURN(std::optional<int> local, int_var(local_var));
    if (local && *local != 0)
      return invalid_argument("{}={} says this launcher is not the first task on its node, but node_rank "
                              "comes from {}: run one `rill launch` per node{}",
                              local_var, *local, source("node_rank"), hint);
    return {};
  }

  // The slots' device type, and with cuda each slot's GPU.
  Status resolve_device() {
    set_string(&LaunchConfig::device, "device", flags_.device.value_or("cpu"), flags_.device ? "flag" : "default");
    if (c_.device == "cpu") return {};
    if (c_.device != "cuda") return invalid_argument("device '{}' (flag): expected cpu or cuda", c_.device);
    if (const std::string* visible = var("CUDA_VISIBLE_DEVICES")) {
      std::string_view rest = *visible;
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        std::string_view gpu = rest.substr(0, comma);
        if (!gpu.empty()) c_.gpus.emplace_back(gpu);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
      if (static_cast<int>(c_.gpus.size()) < c_.nproc_per_node)
        return invalid_argument("CUDA_VISIBLE_DEVICES={} (env) names {} GPU(s) for nproc_per_node {} ({}) processes "
                                "of one GPU each",
                                *visible, c_.gpus.size(), c_.nproc_per_node, source("nproc_per_node"));
      c_.gpus.resize(static_cast<size_t>(c_.nproc_per_node));
      return {};
    }
    for (int i = 0; i < c_.nproc_per_node; ++i) c_.gpus.push_back(std::to_string(i));
    return {};
  }

  Status resolve_node_rank() {
    if (flags_.node_rank || var("NODE_RANK")) {
      RILL_RETURN_IF_ERROR(resolve_int(&LaunchConfig::node_rank, "node_rank", flags_.node_rank, {"NODE_RANK"}, 0));
    } else if (const std::string* text = var("RANK")) {
      RILL_ASSIGN_OR_RETURN(int rank, parse_int(*text, "env RANK"));
      if (rank < 0 || rank % c_.nproc_per_node != 0)
        return invalid_argument("RANK={} (env) is not the rank of a node's first process with nproc_per_node "
                                "{} ({}); pass --node_rank",
                                rank, c_.nproc_per_node, source("nproc_per_node"));
      c_.node_rank = rank / c_.nproc_per_node;
      c_.sources["node_rank"] = "env RANK";
    } else {
      RILL_RETURN_IF_ERROR(resolve_int(&LaunchConfig::node_rank, "node_rank", std::nullopt,
                                       {"OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, 0));
    }
    const std::string& from = source("node_rank");
    if (from.starts_with("env ")) return check_first_on_node("LOCAL_RANK", "");
    if (from.starts_with("ompi ")) return check_first_on_node("OMPI_COMM_WORLD_LOCAL_RANK", " (mpirun -npernode 1)");
    if (from.starts_with("slurm ")) return check_first_on_node("SLURM_LOCALID", " (srun --ntasks-per-node=1)");
    return {};
  }

  Status check() {
    const std::string nodes_from = source("nnodes");
    if (c_.nnodes < 1) return invalid_argument("nnodes {} ({}) must be at least 1", c_.nnodes, nodes_from);
    if (c_.node_rank < 0 || c_.node_rank >= c_.nnodes)
      return invalid_argument("node_rank {} ({}) is out of range for nnodes {} ({}): node ranks run 0..{}",
                              c_.node_rank, source("node_rank"), c_.nnodes, nodes_from, c_.nnodes - 1);
    if (int64_t{c_.nnodes} * c_.nproc_per_node > kMaxWorldSize)
      return invalid_argument("nnodes {} ({}) * nproc_per_node {} ({}) is more than {} processes", c_.nnodes,
                              nodes_from, c_.nproc_per_node, source("nproc_per_node"), kMaxWorldSize);
    const int world = c_.world_size();
    bool both_flags = flags_.nnodes && flags_.nproc_per_node;
    if (both_flags) {
      note_if_differs(
          "WORLD_SIZE", std::to_string(world),
          fmt::format("--nnodes {} * --nproc_per_node {} = {} processes", c_.nnodes, c_.nproc_per_node, world));
    } else if (nodes_from != "env WORLD_SIZE") {
      RILL_ASSIGN_OR_RETURN(std::optional<int> given, int_var("WORLD_SIZE"));
      if (given && *given != world)
        return invalid_argument(
            "WORLD_SIZE={} (env) but nnodes {} ({}) * nproc_per_node {} ({}) = {} processes: in Rill "
            "WORLD_SIZE counts processes, as torchrun's does; if your platform sets it to the number of "
            "nodes, pass --nnodes and --nproc_per_node",
            *given, c_.nnodes, nodes_from, c_.nproc_per_node, source("nproc_per_node"), world);
    }
    const std::string expected_rank = std::to_string(c_.node_rank * c_.nproc_per_node);
    if (flags_.node_rank) {
      note_if_differs("RANK", expected_rank,
                      fmt::format("--node_rank {} (first process {})", c_.node_rank, expected_rank));
    } else if (source("node_rank") == "env NODE_RANK") {
      RILL_ASSIGN_OR_RETURN(std::optional<int> rank, int_var("RANK"));
      if (rank && *rank != c_.node_rank * c_.nproc_per_node)
        return invalid_argument("RANK={} (env) does not match node_rank {} (env NODE_RANK): a launcher's RANK "
                                "is its node's first process, node_rank * nproc_per_node = {}",
                                *rank, c_.node_rank, expected_rank);
    }
    if (!nodes_.empty() && static_cast<int>(nodes_.size()) != c_.nnodes) {
      std::string what = fmt::format("{} lists {} nodes ({}) but nnodes is {} ({})", label(nodelist_var_),
                                     nodes_.size(), *var(nodelist_var_), c_.nnodes, nodes_from);
      if (!flags_.nnodes)
        return invalid_argument("{}: run one launcher per node (srun --ntasks-per-node=1) or pass --nnodes", what);
      c_.notes.push_back(what + ": the node list is not used");
      nodes_.clear();
    }
    c_.machines = nodes_;
    c_.sources["machines"] = nodes_.empty() ? "default" : label(nodelist_var_);
    return {};
  }

  const LaunchFlags& flags_;
  const std::map<std::string, std::string>& env_;
  LaunchConfig c_;
  std::vector<std::string> nodes_;  // Slurm's expanded node list, if any
  std::string nodelist_var_;
};

}  // namespace

StatusOr<LaunchConfig> resolve_launch_config(const LaunchFlags& flags,
                                             const std::map<std::string, std::string>& environment) {
  return LaunchResolver(flags, environment).resolve();
}

std::string describe_sources(const LaunchConfig& config) {
  auto from = [&](const char* field) {
    auto it = config.sources.find(field);
    return it == config.sources.end() ? std::string("default") : it->second;
  };
  std::string line = fmt::format(
      "nnodes={} from {}, node_rank={} from {}, nproc_per_node={} from {}, master_addr={} from {}, "
      "master_port={} from {}",
      config.nnodes, from("nnodes"), config.node_rank, from("node_rank"), config.nproc_per_node,
      from("nproc_per_node"), config.master_addr, from("master_addr"), config.master_port, from("master_port"));
  if (!config.machines.empty())
    line += fmt::format(", machines={} from {}", fmt::join(config.machines, ","), from("machines"));
  if (config.device != "cpu") line += fmt::format(", device={} (GPUs {}) from {}", config.device,
                                                  fmt::join(config.gpus, ","), from("device"));
  return line;
}

namespace env {
namespace {

// One RILL_* variable: unset or empty -> `fallback`; else an integer >= `min`.
StatusOr<int> read(const char* name, int fallback, int min) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  RILL_ASSIGN_OR_RETURN(int value, parse_int(text, fmt::format("environment variable {}", name)));
  if (value < min) return invalid_argument("environment variable {}: {} must be at least {}", name, value, min);
  return value;
}

int or_default(StatusOr<int> value, int fallback) {
  if (value.ok()) return *value;
  spdlog::warn("{}; using {}", value.status().message(), fallback);
  return fallback;
}

}  // namespace

StatusOr<int> try_world_size() { return read("RILL_WORLD_SIZE", 1, 1); }
StatusOr<int> try_rank() { return read("RILL_RANK", 0, 0); }
StatusOr<int> try_local_rank() { return read("RILL_LOCAL_RANK", 0, 0); }
StatusOr<int> try_node_size() { return read("RILL_NODE_SIZE", 1, 1); }

StatusOr<ProcessPlace> try_process_place() {
  ProcessPlace place;
  RILL_ASSIGN_OR_RETURN(place.world_size, try_world_size());
  RILL_ASSIGN_OR_RETURN(place.rank, try_rank());
  RILL_ASSIGN_OR_RETURN(place.local_rank, try_local_rank());
  RILL_ASSIGN_OR_RETURN(place.node_size, try_node_size());
  if (place.rank >= place.world_size)
    return invalid_argument("RILL_RANK={} is not below RILL_WORLD_SIZE={}", place.rank, place.world_size);
  if (place.node_size > place.world_size)
    return invalid_argument("RILL_NODE_SIZE={} nodes is more than RILL_WORLD_SIZE={} processes", place.node_size,
                            place.world_size);
  if (place.world_size % place.node_size != 0)
    return invalid_argument("RILL_WORLD_SIZE={} is not a multiple of RILL_NODE_SIZE={}", place.world_size,
                            place.node_size);
  if (place.local_rank >= place.world_size / place.node_size)
    return invalid_argument("RILL_LOCAL_RANK={} is not below the {} processes per node", place.local_rank,
                            place.world_size / place.node_size);
  return place;
}

StatusOr<comm::Communicator> communicator(std::chrono::milliseconds timeout) {
  RILL_ASSIGN_OR_RETURN(ProcessPlace place, try_process_place());
  comm::Endpoint meet{kDefaultMasterAddr, kDefaultCtrlPort + 2};
  if (place.world_size > 1) {
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    if (addr == nullptr || *addr == '\0' || port == nullptr || *port == '\0')
      return invalid_argument("RILL_WORLD_SIZE={} processes need MASTER_ADDR and MASTER_PORT to meet (rill launch sets them)",
                              place.world_size);
    RILL_ASSIGN_OR_RETURN(int master_port, parse_int(port, "environment variable MASTER_PORT"));
    if (master_port < 1 || master_port + 3 + place.world_size > 65535)
      return invalid_argument("MASTER_PORT={} leaves no ports for {} processes above it", master_port,
                              place.world_size);
    meet = {addr, master_port + 2};
  }
  // The launcher's layout: rank r on node r / (processes per node), as
  // torchrun numbers them.
  std::vector<int> machines;
  if (place.node_size > 1)
    for (int r = 0; r < place.world_size; ++r) machines.push_back(r / (place.world_size / place.node_size));
  return comm::connect_world(place.rank, place.world_size, meet, timeout, std::move(machines));
}

int world_size() { return or_default(try_world_size(), 1); }
int rank() { return or_default(try_rank(), 0); }
int local_rank() { return or_default(try_local_rank(), 0); }
int node_size() { return or_default(try_node_size(), 1); }

}  // namespace env

std::map<std::string, std::string> launch_environment(const LaunchConfig& config, int local_rank) {
  assert(local_rank >= 0 && local_rank < config.nproc_per_node);
  const std::string world = std::to_string(config.world_size());
  const std::string rank = std::to_string(config.node_rank * config.nproc_per_node + local_rank);
  const std::string local = std::to_string(local_rank);
  const std::string nodes = std::to_string(config.nnodes);
  const std::string node = std::to_string(config.node_rank);
  std::map<std::string, std::string> vars = {
      {"RILL_WORLD_SIZE", world},
      {"RILL_RANK", rank},
      {"RILL_LOCAL_RANK", local},
      {"RILL_NODE_SIZE", nodes},
      {"RILL_NODE_RANK", node},
      {"WORLD_SIZE", world},
      {"RANK", rank},
      {"LOCAL_RANK", local},
      {"LOCAL_WORLD_SIZE", std::to_string(config.nproc_per_node)},
      {"NODE_RANK", node},
      {"MASTER_ADDR", config.master_addr},
      {"MASTER_PORT", std::to_string(config.master_port)},
  };
  // Which device the process's device collectives use (rill::env::device_communicator).
  vars["RILL_DEVICE"] = config.device == "cuda" ? "cuda:0" : "cpu";
  if (config.device == "cuda" && local_rank < static_cast<int>(config.gpus.size()))
    vars["CUDA_VISIBLE_DEVICES"] = config.gpus[static_cast<size_t>(local_rank)];
  return vars;
}

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> out;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    size_t equals = text.find('=');
    if (equals == std::string_view::npos) continue;
    out.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
  }
  return out;
}

}  // namespace rill
