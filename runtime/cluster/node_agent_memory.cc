// A node's side of the memory that crosses the data plane between runs of
// a live job (docs/CLUSTER_RUNTIME.md): node 0's memory into a node that
// starts from it, and this node's pieces to node 0's gather.
#include <chrono>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "runtime/cluster/control_codec.h"
#include "runtime/cluster/memory_transfer.h"
#include "runtime/cluster/node_agent.h"

namespace rill::agent_internal {

Status NodeAgent::take_memory(const ctl::PlanPart& part, RunOptions& run) {
  const auto patience = std::chrono::milliseconds(static_cast<int64_t>(run.stall_timeout_s * 1000));
  uint64_t total = 0;
  int64_t step = -1;
  for (uint64_t bytes : part.memory_parts) {
    RILL_ASSIGN_OR_RETURN(std::string received, receive_memory(*transport_, part.tag_base, bytes, patience));
    auto message = ctl::decode(received);
    if (!message.ok()) return message.status().with_context("node 0's memory");
    auto* memory = std::get_if<ctl::PlanPart>(&*message);
    if (memory == nullptr || memory->job_id != part.job_id || memory->phase != part.phase)
      return data_loss("node 0's memory came for another run than job {} phase {}", part.job_id, part.phase);
    for (ctl::Tensor& t : memory->initial_values) run.initial_values[t.name] = std::move(t.values);
    for (ctl::Tensor& t : memory->initial_state) run.initial_state[t.name] = std::move(t.values);
    total += bytes;
    step = memory->kept_step;
  }
  if (!part.memory_parts.empty())
    spdlog::info("job {} phase {}: took node 0's memory at step {} ({} bytes, {} message(s)) over the data plane",
                 part.job_id, part.phase, step, total, part.memory_parts.size());
  return {};
}

// Node 0 gathers the pieces to go on without a lost node: this node's own
// after the step, and the replicas it holds, over the data plane, off the
// loop (as a plan is built). What it cannot send, it says in a PlanAck of
// that phase, which the master's gather watches for.
void NodeAgent::worker_on(ctl::Gather& m) {
  builder_->post([this, m, link = links_.load()] {
    if (links_.load() != link) return;
    const double patience_s = m.patience_s > 0 ? m.patience_s : options_.stall_timeout_s;  // the job's, as node 0's
    const auto patience = std::chrono::milliseconds(static_cast<int64_t>(patience_s * 1000));
    // Node 0's acks come on the phase's tags, which this node opens now (it
    // runs nothing until that phase).
    transport_->accept_tags(m.tag_base, m.tag_base + kTagsPerRun);
    transport_->limit_message_bytes(0);
    auto messages = gather_messages(m.job_id, m.step, m.own, m.replicas_of);
    Status sent = messages.status();
    const StreamTags tags{m.tag_base + kGatherChunkTag, m.tag_base + kGatherAckTag};
    if (messages.ok()) sent = send_stream(*transport_, 0, tags, m.step, *messages, patience);
    if (sent.ok()) {
      spdlog::info("{}: sent node 0 its pieces after step {}{} ({} message(s))", me(), m.step,
                   m.replicas_of.empty() ? "" : " and the replicas it holds", messages->size());
      return;
    }
    spdlog::error("{}: sending node 0 the pieces after step {}: {}", me(), m.step, sent.message());
    if (links_.load() == link)
      post_to_master(ctl::PlanAck{m.job_id, m.phase, options_.rank, fmt::format("{}: {}", me(), sent.message()),
                                  sent.code()});
  });
}

}  // namespace rill::agent_internal
