// Node 0's memory to the nodes that come back (live membership): the kept
// model and optimizer state as control-encoded messages, sent to every
// newcomer at once over the data plane (runtime/cluster/memory_transfer.h).
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "runtime/cluster/control_codec.h"
#include "runtime/cluster/master.h"
#include "runtime/cluster/memory_pieces.h"
#include "runtime/cluster/memory_transfer.h"

namespace rill::agent_internal {

StatusOr<std::vector<std::string>> Master::memory_messages(int64_t job_id, int phase, int64_t step,
                                                            bool gathered) {
  std::map<std::string, std::vector<float>> values, states;
  if (gathered && gathered_->job == job_id && gathered_->step == step) {
    // The pieces node 0 gathered to go on without a lost node (master_gather.cc).
    values = gathered_->values;
    states = gathered_->state;
  } else {
    if (Status taken = kept_.values_at(job_id, step, &values, &states); !taken.ok())
      return taken.with_context(fmt::format("taking back a node at step {}", step));
    // PowerSGD's Q, which every node's must equal: the survivors go on
    // with theirs, so the newcomer takes node 0's (and no error: it has
    // sent nothing yet). From a gather every node starts afresh instead.
    for (auto& [name, v] : kept_.carried_at(job_id, step))
      if (name.ends_with("_q")) states[name] = std::move(v);
  }
  // Tensors in order, a message each time the next would take one past
  // --max-message-bytes (a tensor larger than that goes alone).
  std::vector<ctl::Tensor> whole_values, whole_state;
  for (auto& [name, v] : values) whole_values.push_back(ctl::Tensor{name, {}, {}, {}, std::move(v)});
  for (auto& [name, v] : states) whole_state.push_back(ctl::Tensor{name, {}, {}, {}, std::move(v)});
  return pack_tensors(std::move(whole_values), std::move(whole_state), job_id, phase, step,
                      options_.max_message_bytes, "taking back a node");
}

Status Master::send_memory_to(const std::vector<int>& newcomers, uint64_t tag_base,
                              const std::vector<std::string>& memory, double patience_s) {
  if (memory.empty()) return {};
  // To every newcomer at once: a later one waits for none of the others.
  const auto patience = std::chrono::milliseconds(static_cast<int64_t>(patience_s * 1000));
  std::vector<Status> sent(newcomers.size());
  std::vector<std::thread> senders;
  for (size_t i = 0; i < newcomers.size(); ++i)
    senders.emplace_back([&, i] {
      for (const std::string& m : memory)
        if (sent[i] = send_memory(*transport_, newcomers[i], tag_base, m, patience); !sent[i].ok()) return;
    });
  for (std::thread& t : senders) t.join();
  for (size_t i = 0; i < newcomers.size(); ++i) {
    if (sent[i].ok()) continue;
    const std::string failure = fmt::format("{}: {}", node_name(options_.machines, newcomers[i]), sent[i].message());
    // A newcomer gone mid-transfer: its loss, once the agent's loop has
    // seen it, lets the job go on without it (as any lost node).
    MutexLock lock(phase_mu_);
    const auto deadline = now() + std::chrono::seconds(5);
    while (phase_.lost.empty() && transport_->peer_lost(newcomers[i]) && wait_phase_until(deadline)) {
    }
    return Status(sent[i].code() == Code::kDataLoss ? Code::kDataLoss : Code::kUnavailable, failure);
  }
  return {};
}

}  // namespace rill::agent_internal
