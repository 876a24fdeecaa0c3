#include "runtime/cluster/comm_waits.h"

#include <set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace rill {
namespace {

struct Wait {
  int node = -1;      // the waiting node
  int waits_for = -1;
  std::string caller, op;
  int64_t seq = -1;
};

// A collective as every node knows it: its task's name without the node
// ("bucket:grad/w1:P->B@node2" -> "bucket:grad/w1:P->B").
std::string collective_of(const std::string& caller) {
  const size_t at = caller.rfind("@node");
  return at == std::string::npos ? caller : caller.substr(0, at);
}

}  // namespace

nlohmann::json read_record(const std::string& text) {
  if (text.size() > kMaxRecordBytes) return nullptr;
  const nlohmann::json::parser_callback_t shallow = [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    return depth <= kMaxRecordDepth;
  };
  nlohmann::json record = nlohmann::json::parse(text, shallow, /*allow_exceptions=*/false);
  return record.is_object() ? record : nlohmann::json(nullptr);
}

std::string explain_waits(const std::map<int, std::string>& records, const std::function<std::string(int)>& name) {
  std::map<int, Wait> waits;                         // by waiting node: its first waiting collective
  std::map<std::string, std::map<int, int64_t>> completed;  // caller -> node -> its last completed call
  std::map<std::string, std::string> last_op;
  for (const auto& [node, text] : records) {
    const nlohmann::json record = read_record(text);
    if (!record.is_object() || !record.contains("callers") || !record["callers"].is_array()) continue;
    // A node's record as it sent it: a field of another type than its own
    // is dropped with the rest of that record, never trusted.
    try {
    for (const nlohmann::json& c : record["callers"]) {
      if (!c.is_object() || !c.contains("name")) continue;
      const std::string caller = collective_of(c.value("name", ""));
      if (c.contains("last_completed")) {
        completed[caller][node] = c["last_completed"].value("seq", int64_t{-1});
        last_op[caller] = c["last_completed"].value("op", "");
      }
      if (c.contains("waiting_for") && c["waiting_for"].is_number_integer() && waits.count(node) == 0)
        waits[node] = Wait{node, c["waiting_for"].get<int>(), caller, c.value("op", ""), c.value("seq", int64_t{-1})};
    }
    } catch (const nlohmann::json::exception&) {
      waits.erase(node);
      for (auto& [caller, by_node] : completed) by_node.erase(node);
    }
  }
  if (waits.empty()) return {};
  // Follow each wait to the node it ends at: one that waits for nobody.
  std::map<int, std::vector<int>> by_root;
  for (const auto& [node, wait] : waits) {
    int at = wait.waits_for;
    std::set<int> seen{node};
    while (waits.count(at) != 0 && seen.insert(at).second) at = waits.at(at).waits_for;
    by_root[at].push_back(node);
  }
  std::vector<std::string> parts;
  for (const auto& [root, nodes] : by_root) {
    std::vector<std::string> how;
    for (int node : nodes) {
      const Wait& w = waits.at(node);
      how.push_back(fmt::format("{} in {} {} #{} for {}", name(node), w.caller, w.op, w.seq,
                                w.waits_for == root ? "it" : name(w.waits_for)));
    }
    const bool every = nodes.size() + 1 == records.size() + (records.count(root) ? 0 : 1);
    parts.push_back(fmt::format("{} waited for {}{} ({})", every ? "every other node" : fmt::format("{} node(s)", nodes.size()),
                                name(root), records.count(root) ? "" : ", which left no record", fmt::join(how, "; ")));
  }
  // The last call of the waiting collective each node completed.
  const Wait& first = waits.begin()->second;
  std::vector<std::string> done;
  for (const auto& [node, seq] : completed[first.caller]) done.push_back(fmt::format("#{} on {}", seq, name(node)));
  std::string out = fmt::format("{}", fmt::join(parts, "; "));
  if (!done.empty())
    out += fmt::format("; the last {} {} completed: {}", first.caller, last_op[first.caller], fmt::join(done, ", "));
  return out;
}

}  // namespace rill
