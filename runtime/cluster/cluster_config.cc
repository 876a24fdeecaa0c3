#include "runtime/cluster/cluster_config.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>

#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kernels/data/file_bytes.h"

namespace rill {
namespace {

constexpr size_t kMaxNodelistHosts = 65536;

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool host_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
}

Status check_port(int port, std::string_view what) {
  if (port < 1 || port > kMaxCtrlPort)
    return invalid_argument("{}: port {} is out of range 1..{} (the data port is ctrl_port + 1)", what, port,
                            kMaxCtrlPort);
  return {};
}


struct Entry {
  std::string text;
  std::string where;
};

StatusOr<std::vector<Entry>> read_machine_file(const std::string& path) {
  auto bytes = read_file_bytes(path);
  if (!bytes.ok()) return bytes.status().with_context("reading the machine file");
  std::istringstream in(std::string(bytes->begin(), bytes->end()));
  std::vector<Entry> entries;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string_view text(line);
    text = trim(text.substr(0, text.find('#')));
    if (text.empty()) continue;
    std::string where = fmt::format("{}:{} ('{}')", path, number, text);
    if (text.find(',') != std::string_view::npos || text.find_first_of(" \t") != std::string_view::npos)
      return invalid_argument("{}: one entry per line", where);
    entries.push_back({std::string(text), where});
  }
  if (in.bad()) return data_loss("error reading machine file '{}'", path);
  if (entries.empty()) return invalid_argument("machine file '{}' lists no machines", path);
  return entries;
}

}  // namespace

StatusOr<Machine> parse_machine(std::string_view entry, int default_port, const std::string& where) {
  Machine machine{"", default_port};
  std::string_view address, port;
  bool has_port = false;
  if (entry.starts_with('[')) {
    size_t close = entry.find(']');
    if (close == std::string_view::npos) return invalid_argument("{}: '[' without a closing ']'", where);
    address = entry.substr(1, close - 1);
    std::string_view rest = entry.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return invalid_argument("{}: expected ':port' after ']'", where);
      port = rest.substr(1);
      has_port = true;
    }
    if (address.empty()) return invalid_argument("{}: empty address", where);
    for (char c : address)
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.' && c != '%' && !host_char(c))
        return invalid_argument("{}: '{}' is not a valid IPv6 address", where, address);
  } else {
    size_t colons = std::count(entry.begin(), entry.end(), ':');
    if (colons > 1)
      return invalid_argument("{}: an IPv6 address goes in brackets, e.g. [::1]:{}", where, default_port);
    size_t colon = entry.find(':');
    address = entry.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = entry.substr(colon + 1);
      has_port = true;
    }
    if (address.empty()) return invalid_argument("{}: empty address", where);
    for (char c : address)
      if (!host_char(c))
        return invalid_argument("{}: '{}' is not a host name or address (character '{}')", where, address, c);
  }
  if (has_port) {
    auto parsed = parse_int(port, "port");
    if (!all_digits(port) || !parsed.ok()) return invalid_argument("{}: port '{}' is not a number", where, port);
    machine.ctrl_port = *parsed;
  }
  RILL_RETURN_IF_ERROR(check_port(machine.ctrl_port, where));
  machine.address = std::string(address);
  return machine;
}

StatusOr<int> parse_int(std::string_view text, std::string_view what) {
  std::string_view t = trim(text);
  int value = 0;
  const char* begin = t.data();
  const char* end = t.data() + t.size();
  if (!t.empty() && *begin == '+') ++begin;  // from_chars refuses a leading '+'
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (t.empty() || begin == end || ec == std::errc::invalid_argument || ptr != end)
    return invalid_argument("{}: '{}' is not an integer", what, text);
  if (ec == std::errc::result_out_of_range) return invalid_argument("{}: '{}' is out of range", what, text);
  return value;
}

StatusOr<std::vector<Machine>> parse_machine_list(const std::string& list_or_file, int default_ctrl_port) {
  RILL_RETURN_IF_ERROR(check_port(default_ctrl_port, "default control port"));
  std::string_view input = trim(list_or_file);
  if (input.empty()) return invalid_argument("machine list is empty");
  std::vector<Entry> entries;
  std::error_code ec;
  bool is_list = input.find(',') != std::string_view::npos;
  if (!is_list && std::filesystem::is_regular_file(std::string(input), ec)) {
    RILL_ASSIGN_OR_RETURN(entries, read_machine_file(std::string(input)));
  } else if (!is_list && input.find('/') != std::string_view::npos) {
    return not_found("machine file '{}' does not exist (or is not a file)", input);
  } else {
    size_t start = 0;
    for (int number = 1;; ++number) {
      size_t comma = input.find(',', start);
      std::string_view text = trim(input.substr(start, comma == std::string_view::npos ? comma : comma - start));
      std::string where = fmt::format("machine list entry {} ('{}')", number, text);
      if (text.empty()) return invalid_argument("machine list entry {} is empty", number);
      entries.push_back({std::string(text), where});
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  std::vector<Machine> machines;
  for (size_t i = 0; i < entries.size(); ++i) {
    RILL_ASSIGN_OR_RETURN(Machine machine, parse_machine(entries[i].text, default_ctrl_port, entries[i].where));
    for (size_t j = 0; j < machines.size(); ++j) {
      const Machine& other = machines[j];
      if (lower(other.address) != lower(machine.address)) continue;
      if (other.ctrl_port == machine.ctrl_port)
        return invalid_argument("{}: duplicates {} ({})", entries[i].where, entries[j].where, format_machine(other));
      // Each node also binds ctrl_port + 1 for data on its address.
      if (other.ctrl_port + 1 == machine.ctrl_port || machine.ctrl_port + 1 == other.ctrl_port)
        return invalid_argument("{}: its ports {}-{} (control, data) overlap those of {} on the same address",
                                entries[i].where, machine.ctrl_port, machine.ctrl_port + 1, entries[j].where);
    }
    machines.push_back(std::move(machine));
  }
  return machines;
}

std::string format_machine(const Machine& machine) {
  if (machine.address.find(':') != std::string::npos) return fmt::format("[{}]:{}", machine.address, machine.ctrl_port);
  return fmt::format("{}:{}", machine.address, machine.ctrl_port);
}

std::string machine_list(const std::vector<Machine>& machines) {
  std::string list;
  for (const Machine& m : machines) list += (list.empty() ? "" : ",") + format_machine(m);
  return list;
}

StatusOr<std::string> reachable_address(const std::string& address, const std::string& where) {
  char spelled[INET6_ADDRSTRLEN] = {};
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    const uint32_t host = ntohl(v4.s_addr);
    if (host == 0 || host == 0xffffffffu || (host >> 28) == 0xe)
      return invalid_argument("{}: {} is no one machine's address (unspecified, broadcast or multicast)", where,
                              address);
    inet_ntop(AF_INET, &v4, spelled, sizeof spelled);
  } else if (inet_pton(AF_INET6, address.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_UNSPECIFIED(&v6) || IN6_IS_ADDR_MULTICAST(&v6))
      return invalid_argument("{}: {} is no one machine's address (unspecified or multicast)", where, address);
    inet_ntop(AF_INET6, &v6, spelled, sizeof spelled);
  } else {
    return invalid_argument("{}: '{}' is not an IPv4 or IPv6 address (a name would be resolved on every node, and "
                            "could resolve otherwise on each)",
                            where, address);
  }
  return std::string(spelled);
}

bool is_loopback_address(const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(address.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return false;
  bool loopback = true;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      loopback = loopback && (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const auto* in = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      loopback = loopback && IN6_IS_ADDR_LOOPBACK(&in->sin6_addr);
    } else {
      loopback = false;
    }
  }
  freeaddrinfo(found);
  return loopback;
}

std::string tcp_endpoint(const std::string& address, int port) {
  return "tcp://" + format_machine(Machine{address, port});
}

// Grammar: list := host (',' host)*;  host := (text | '[' range (',' range)* ']')+;
// range := digits ('-' digits)?. Commas inside brackets separate ranges, not hosts.
StatusOr<std::vector<std::string>> expand_slurm_nodelist(const std::string& nodelist) {
  std::string_view input = trim(nodelist);
  if (input.empty()) return invalid_argument("Slurm node list is empty");
  auto error = [&](size_t pos, std::string_view what) {
    return invalid_argument("Slurm node list '{}': {} at position {}", input, what, pos);
  };
  std::vector<std::string> hosts;
  // The hosts of the current item so far: the cartesian product of its parts.
  std::vector<std::string> partial{""};
  bool item_empty = true;
  size_t i = 0;
  while (true) {
    if (i == input.size() || input[i] == ',') {
      if (item_empty) return error(i, "empty host name");
      hosts.insert(hosts.end(), partial.begin(), partial.end());
      partial = {""};
      item_empty = true;
      if (i == input.size()) break;
      ++i;
      continue;
    }
    if (input[i] == ']') return error(i, "']' without '['");
    if (input[i] != '[') {
      size_t end = i;
      while (end < input.size() && input[end] != ',' && input[end] != '[' && input[end] != ']') {
        if (!host_char(input[end])) return error(end, fmt::format("unexpected character '{}'", input[end]));
        ++end;
      }
      for (std::string& p : partial) p.append(input.substr(i, end - i));
      item_empty = false;
      i = end;
      continue;
    }
    size_t close = input.find(']', i);
    if (close == std::string_view::npos) return error(i, "'[' without ']'");
    std::string_view body = input.substr(i + 1, close - i - 1);
    if (body.find('[') != std::string_view::npos) return error(i, "nested '['");
    std::vector<std::string> suffixes;
    size_t start = 0;
    while (true) {
      size_t comma = body.find(',', start);
      std::string_view range = body.substr(start, comma == std::string_view::npos ? comma : comma - start);
      size_t pos = i + 1 + start;
      size_t dash = range.find('-');
      std::string_view lo = range.substr(0, dash);
      std::string_view hi = dash == std::string_view::npos ? lo : range.substr(dash + 1);
      if (range.empty()) return error(pos, "empty range in brackets");
      if (!all_digits(lo) || !all_digits(hi) || lo.size() > 9 || hi.size() > 9)
        return error(pos, fmt::format("range '{}' is not N or N-M with decimal numbers", range));
      int64_t a = *parse_int(lo, "lo"), b = *parse_int(hi, "hi");
      if (a > b) return error(pos, fmt::format("range '{}' runs backwards", range));
      if (static_cast<size_t>(b - a) >= kMaxNodelistHosts)
        return error(pos, fmt::format("range '{}' has more than {} hosts", range, kMaxNodelistHosts));
      for (int64_t n = a; n <= b; ++n) suffixes.push_back(fmt::format("{:0{}}", n, lo.size()));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (partial.size() * suffixes.size() + hosts.size() > kMaxNodelistHosts)
      return error(i, fmt::format("expands to more than {} hosts", kMaxNodelistHosts));
    std::vector<std::string> next;
    next.reserve(partial.size() * suffixes.size());
    for (const std::string& p : partial)
      for (const std::string& s : suffixes) next.push_back(p + s);
    partial = std::move(next);
    item_empty = false;
    i = close + 1;
  }
  return hosts;
}

std::string node_log_path(const std::string& logdir, int node_rank, int local_rank) {
  std::string name = local_rank < 0 ? fmt::format("node{}.log", node_rank)
                                    : fmt::format("node{}.proc{}.log", node_rank, local_rank);
  return (std::filesystem::path(logdir) / name).string();
}

Status resolve_distributed(graph::Job* job, const std::vector<Machine>& machines) {
  if (!job->pserver_mode()) return {};
  graph::Distributed& d = *job->distributed;
  // Fluid's flags, read from the environment where set.
  const auto flag = [](const char* name, int64_t lo, int64_t hi, int64_t* value) -> Status {
    const char* env = std::getenv(name);
    if (env == nullptr || *env == '\0') return {};
    auto parsed = parse_int(env, fmt::format("env {}", name));
    if (!parsed.ok()) return parsed.status();
    if (*parsed < lo || *parsed > hi) return invalid_argument("env {} must be {} to {}, got {}", name, lo, hi, *parsed);
    *value = *parsed;
    return {};
  };
  RILL_RETURN_IF_ERROR(flag("FLAGS_rpc_deadline", 1, graph::kMaxRpcDeadlineMs, &d.rpc_deadline));
  RILL_RETURN_IF_ERROR(flag("FLAGS_rpc_send_thread_num", 1, graph::kMaxRpcThreads, &d.rpc_send_thread_num));
  RILL_RETURN_IF_ERROR(flag("FLAGS_rpc_get_thread_num", 1, graph::kMaxRpcThreads, &d.rpc_get_thread_num));
  RILL_RETURN_IF_ERROR(flag("FLAGS_rpc_prefetch_thread_num", 1, graph::kMaxRpcThreads, &d.rpc_prefetch_thread_num));
  for (std::string& entry : d.pservers) {
    if (entry.find_first_not_of("0123456789") == std::string::npos) continue;  // a node number
    int found = -1, matches = 0;
    for (size_t node = 0; node < machines.size(); ++node) {
      const Machine& m = machines[node];
      if (format_machine(m) == entry) {
        found = static_cast<int>(node);
        matches = 1;
        break;
      }
      if (m.address == entry) {
        found = static_cast<int>(node);
        ++matches;
      }
    }
    if (matches != 1) {
      std::vector<std::string> listed;
      for (const Machine& m : machines) listed.push_back(format_machine(m));
      return invalid_argument("distributed.pservers: '{}' {} (the machine list: {})", entry,
                              matches == 0 ? "is neither a node number nor a machine of the list"
                                           : "is the address of several machines; add the control port",
                              fmt::join(listed, ", "));
    }
    entry = std::to_string(found);
  }
  return {};
}

double job_stall_timeout_s(const graph::Job& job, double agent_default) {
  if (job.pserver_mode() && job.distributed->rpc_deadline > 0)
    return static_cast<double>(job.distributed->rpc_deadline) / 1000.0;
  return agent_default;
}

}  // namespace rill
