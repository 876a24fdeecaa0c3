#include "graph/placement.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "base/devices.h"

namespace rill::graph {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_int(std::string_view s, int* out) {
  s = trim(s);
  auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && error == std::errc() && end == s.data() + s.size() && *out >= 0;
}

// "3" or "0-7" into the numbers, ascending.
bool parse_range(std::string_view s, int limit, std::vector<int>* out) {
  const size_t dash = s.find('-');
  int lo = 0, hi = 0;
  if (dash == std::string_view::npos) {
    if (!parse_int(s, &lo)) return false;
    hi = lo;
  } else if (!parse_int(s.substr(0, dash), &lo) || !parse_int(s.substr(dash + 1), &hi) || hi < lo) {
    return false;
  }
  if (hi >= limit) return false;
  for (int i = lo; i <= hi; ++i) out->push_back(i);
  return true;
}

std::string range_string(const std::vector<int>& v, size_t begin, size_t end) {
  return end - begin == 1 ? std::to_string(v[begin]) : fmt::format("{}-{}", v[begin], v[end - 1]);
}

// "0-1, 3" for {0, 1, 3}: runs of consecutive numbers.
std::vector<std::string> runs(const std::vector<int>& v) {
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i + 1;
    while (j < v.size() && v[j] == v[j - 1] + 1) ++j;
    out.push_back(range_string(v, i, j));
    i = j;
  }
  return out;
}

}  // namespace

std::string Placement::to_string() const {
  std::string text = any_type ? "" : device_type_name(type);
  if (two_d) text += fmt::format("{}[{},{}]", text.empty() ? "" : " ", num_nodes(), per_node());
  // NODES:DEVICES entries: node runs when the devices are one run; with gaps
  // ("0,2" is not one entry's DEVICES), each node with each device run.
  const std::vector<std::string> device_runs = all_devices ? std::vector<std::string>{"*"} : runs(devices);
  std::vector<std::string> entries;
  if (device_runs.size() == 1) {
    for (const std::string& node_run : runs(nodes)) entries.push_back(node_run + ":" + device_runs[0]);
  } else {
    for (int n : nodes)
      for (const std::string& d : device_runs) entries.push_back(fmt::format("{}:{}", n, d));
  }
  return fmt::format("{}{}{}", text, text.empty() ? "" : " ", fmt::join(entries, ", "));
}

StatusOr<Placement> parse_placement(std::string_view text) {
  auto bad = [&](std::string_view what) {
    return invalid_argument("placement '{}': {} (expected e.g. 'cpu 0:0-1, 1:0-1', 'cpu [2,2] 0:0-1, 1:0-1' or, on the job's devices, '0:0-1, 1:0-1')", text,
                            what);
  };
  std::string_view rest = trim(text);
  Placement p;
  if (!rest.empty() && (rest.front() == '[' || (rest.front() >= '0' && rest.front() <= '9'))) {
    p.any_type = true;  // the job's device type
  } else {
    const size_t space = rest.find_first_of(" \t[");
    if (space == std::string_view::npos) return bad("no devices after the device type");
    const std::string_view type = rest.substr(0, space);
    if (type == "cuda") p.type = DeviceType::kCuda;
    else if (type != "cpu") return bad(fmt::format("unknown device type '{}' (cpu or cuda)", type));
    rest = trim(rest.substr(space));
  }
  std::vector<int> hierarchy;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("'[' without ']'");
    std::string_view dims = rest.substr(1, close - 1);
    while (true) {
      const size_t comma = dims.find(',');
      int v = 0;
      if (!parse_int(dims.substr(0, comma), &v) || v < 1) return bad("a hierarchy is [n] or [a,b] of positive sizes");
      hierarchy.push_back(v);
      if (comma == std::string_view::npos) break;
      dims.remove_prefix(comma + 1);
    }
    if (hierarchy.size() > 2) return bad("a hierarchy has at most 2 axes ([nodes, devices per node])");
    rest = trim(rest.substr(close + 1));
  }
  if (rest.empty()) return bad("no devices");
  std::map<int, std::vector<int>> by_node;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view entry = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t colon = entry.find(':');
    if (colon == std::string_view::npos) return bad(fmt::format("'{}' is not NODES:DEVICES", entry));
    std::vector<int> nodes, devices;
    if (!parse_range(entry.substr(0, colon), 1 << ActorId::kNodeBits, &nodes))
      return bad(fmt::format("'{}' is not a node or a range of nodes a-b", trim(entry.substr(0, colon))));
    const bool every = trim(entry.substr(colon + 1)) == "*";
    if (by_node.empty()) p.all_devices = every;
    if (every != p.all_devices) return bad("'*' (every device of a node) goes in every entry or in none");
    if (!every && !parse_range(entry.substr(colon + 1), kMaxDevicesPerNode, &devices))
      return bad(fmt::format("'{}' is not a device, a range of devices a-b or *", trim(entry.substr(colon + 1))));
    if (every)
      for (int n : nodes)
        if (!by_node.try_emplace(n).second) return bad(fmt::format("node {} is listed twice", n));
    for (int n : nodes)
      for (int d : devices) {
        std::vector<int>& on = by_node[n];
        if (std::find(on.begin(), on.end(), d) != on.end())
          return bad(fmt::format("device {} of node {} is listed twice", d, n));
        on.push_back(d);
      }
  }
  for (auto& [node, devices] : by_node) {
    std::sort(devices.begin(), devices.end());
    p.nodes.push_back(node);
    if (p.devices.empty()) p.devices = devices;
    if (devices != p.devices)
      return bad(fmt::format("every node must have the same devices; node {} has {}, node {} has {}", p.nodes[0],
                             fmt::join(runs(p.devices), ","), node, fmt::join(runs(devices), ",")));
  }
  if (p.all_devices) {
    if (!hierarchy.empty()) return bad("a hierarchy needs the devices named, not *");
    return p;
  }
  if (hierarchy.size() == 1 && hierarchy[0] != p.parallel())
    return bad(fmt::format("hierarchy [{}] over {} devices", hierarchy[0], p.parallel()));
  if (hierarchy.size() == 2) {
    if (hierarchy[0] != p.num_nodes() || hierarchy[1] != p.per_node())
      return bad(fmt::format("hierarchy [{},{}] over {} nodes x {} devices: a 2-D hierarchy is [nodes, devices per "
                             "node], here [{},{}]",
                             hierarchy[0], hierarchy[1], p.num_nodes(), p.per_node(), p.num_nodes(), p.per_node()));
    p.two_d = true;
  }
  return p;
}

Placement whole_cluster(DeviceType type, int num_nodes, int per_node) {
  Placement p;
  p.type = type;
  for (int n = 0; n < num_nodes; ++n) p.nodes.push_back(n);
  for (int d = 0; d < per_node; ++d) p.devices.push_back(d);
  return p;
}

}  // namespace rill::graph
