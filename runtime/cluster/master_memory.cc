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
#include "runtime/cluster/memory_transfer.h"

namespace rill::agent_internal {

StatusOr<std::vector<std::string>> Master::memory_messages(int64_t job_id, int phase, int64_t step) {
  std::map<std::string, std::vector<float>> values, states;
  if (Status taken = kept_.values_at(job_id, step, &values, &states); !taken.ok())
    return taken.with_context(fmt::format("taking back a node at step {}", step));
  // Tensors in order, a message each time the next would take one past
  // --max-message-bytes (a tensor larger than that goes alone), and never
  // past kMemoryMessageBytes (a FlatBuffer holds at most 2 GiB).
  const size_t most = std::min(kMemoryMessageBytes, options_.max_message_bytes);
  std::vector<std::string> out;
  ctl::PlanPart memory;
  size_t held = 0;
  auto flush = [&] {
    if (memory.initial_values.empty() && memory.initial_state.empty()) return;
    memory.job_id = job_id;
    memory.phase = phase;
    memory.kept_step = step;
    out.push_back(ctl::encode(memory));
    memory = ctl::PlanPart{};
    held = 0;
  };
  auto add = [&](std::vector<ctl::Tensor>& into, const std::string& name, std::vector<float>& v) -> Status {
    const size_t bytes = v.size() * sizeof(float) + name.size() + 64;
    if (bytes > kMemoryMessageBytes)
      return invalid_argument("taking back a node at step {}: '{}' ({} bytes) is larger than one message holds ({} "
                              "bytes)",
                              step, name, bytes, kMemoryMessageBytes);
    if (held > 0 && held + bytes > most) flush();
    into.push_back(ctl::Tensor{name, {}, {}, {}, std::move(v)});
    held += bytes;
    return {};
  };
  for (auto& [name, v] : values) RILL_RETURN_IF_ERROR(add(memory.initial_values, name, v));
  for (auto& [name, v] : states) RILL_RETURN_IF_ERROR(add(memory.initial_state, name, v));
  flush();
  return out;
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
