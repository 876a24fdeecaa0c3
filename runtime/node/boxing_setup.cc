#include "runtime/node/boxing_setup.h"

#include <algorithm>
#include <chrono>

#include "compiler/boxing_task.h"
#include "compiler/compiler.h"
#include "runtime/node/plan_reader.h"

namespace rill {

StatusOr<Body> BoxingSetup::body(const plan::Plan& plan, const plan::Task& task, std::byte* scratch) {
  RILL_ASSIGN_OR_RETURN(compiler::BoxingTask work, compiler::boxing_task(plan, task));
  // The plan's device collectives (train.nccl) are compiled, ordered and
  // verified, but the node does not run them on NCCL yet: refused here, so
  // no gradient is left unsummed.
  if (work.comm_group >= 0)
    return Status(Code::kFailedPrecondition,
                  fmt::format("task '{}': a device collective of communicator {} (train.nccl): this build plans NCCL "
                              "all-reduces but does not run them yet; set train.nccl to false to sum through host "
                              "memory",
                              read_string(task.name()), work.comm_group));
  comm::Collectives* collectives = nullptr;
  if (work.exchanges) {
    RILL_ASSIGN_OR_RETURN(collectives, collectives_for(read_string(task.name()), *task.boxing()));
  }
  const uint64_t tag = tag_base_ + 1 + task.boxing()->collective_tag();
  return Body(std::in_place_type<BoxingBody>, std::move(work.plan), collectives, tag,
              static_cast<comm::ReduceOp>(work.reduce_op), scratch);
}

StatusOr<comm::Collectives*> BoxingSetup::collectives_for(const std::string& name, const plan::BoxingConf& conf) {
  if (transport_ == nullptr)
    return invalid_argument("task '{}': boxing across {} nodes needs a transport", name, conf.num_nodes());
  // Among the nodes of its peers (its placement's), which need not be every
  // node of the cluster.
  comm::Transport* transport = transport_;
  std::vector<int> nodes;
  if (conf.peers() != nullptr)
    for (uint64_t peer : *conf.peers()) nodes.push_back(static_cast<int>(ActorId::node(peer)));
  if (nodes.empty() || static_cast<int>(nodes.size()) != conf.num_nodes() ||
      !std::is_sorted(nodes.begin(), nodes.end()) || std::adjacent_find(nodes.begin(), nodes.end()) != nodes.end())
    return invalid_argument("task '{}': boxing across {} nodes with peers on {} nodes ({})", name, conf.num_nodes(),
                            nodes.size(), fmt::join(nodes, ", "));
  if (nodes.back() >= transport->world())
    return invalid_argument("task '{}': boxing with node {}, but the cluster has {} nodes", name, nodes.back(),
                            transport->world());
  if (conf.num_nodes() != transport->world()) {
    groups_.push_back(std::make_unique<comm::GroupTransport>(*transport, nodes));
    if (!groups_.back()->member())
      return invalid_argument("task '{}': boxing among nodes {} runs on node {}", name, fmt::join(nodes, ", "),
                              transport->rank());
    transport = groups_.back().get();
  }
  collectives_.push_back(std::make_unique<comm::Collectives>(
      *transport,
      comm::CollectiveOptions{.timeout = std::chrono::milliseconds(static_cast<int64_t>(stall_timeout_s_ * 1000))}));
  return collectives_.back().get();
}

}  // namespace rill
