#include "comm/connection_guard.h"

#include <algorithm>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace rill::comm {
namespace {

constexpr std::chrono::seconds kLogEvery{10};
constexpr size_t kReportsKept = 4096;  // addresses whose cuts wait to be logged
const std::string kOtherAddresses = "other addresses";

// The local port of `fd` if it is a connected TCP socket (not a listener),
// else -1: what a descriptor must still be for the guard to cut it.
int accepted_port(int fd) {
  int listening = 0;
  socklen_t size = sizeof listening;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || listening != 0) return -1;
  sockaddr_storage local{};
  socklen_t local_size = sizeof local;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0) return -1;
  if (local.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
  if (local.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port);
  return -1;
}

}  // namespace

std::string socket_peer_address(int fd, bool with_port) {
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) return {};
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    return with_port ? fmt::format("{}:{}", text, ntohs(in->sin_port)) : std::string(text);
  }
  if (address.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof text);
    return with_port ? fmt::format("[{}]:{}", text, ntohs(in->sin6_port)) : fmt::format("[{}]", text);
  }
  return {};
}

ConnectionGuard::ConnectionGuard(std::string where, int port, ConnectionLimits limits)
    : where_(std::move(where)), port_(port), limits_(limits) {}

int ConnectionGuard::pick(int fd, const std::string& address) const {
  if (limits_.young.count() == 0) return fd;
  int oldest = -1;
  Clock::time_point since = Clock::time_point::max();
  for (const auto& [open_fd, open] : open_)
    if ((address.empty() || open.address == address) && open.since < since) {
      oldest = open_fd;
      since = open.since;
    }
  return oldest;
}

std::vector<int> ConnectionGuard::admit(int fd, const std::string& address, Clock::time_point now) {
  std::vector<int> fds;
  for (const Cut& cut : admit_peer(fd, address, address, now)) fds.push_back(cut.fd);
  return fds;
}

std::vector<ConnectionGuard::Cut> ConnectionGuard::admit_peer(int fd, const std::string& address,
                                                              const std::string& peer, Clock::time_point now) {
  if (!limits_.admitted.empty() &&
      std::find(limits_.admitted.begin(), limits_.admitted.end(), address) == limits_.admitted.end()) {
    note_cut(address, "not an address of the cluster's machine list", now);
    return {Cut{fd, peer}};
  }
  if (limits_.young.count() > 0)
    std::erase_if(open_, [&](const auto& entry) { return now - entry.second.since >= limits_.young; });
  open_[fd] = Open{address, peer, now};
  std::vector<Cut> cut;
  auto count_of = [&](const std::string& a) {
    int n = 0;
    for (const auto& entry : open_) n += entry.second.address == a ? 1 : 0;
    return n;
  };
  // Each turn forgets one counted connection: bounded by how many there are.
  while (count_of(address) > limits_.per_address) {
    const int victim = pick(fd, address);
    if (victim < 0) break;
    cut.push_back(Cut{victim, open_.at(victim).peer});
    open_.erase(victim);
    note_cut(address, over(true), now);
  }
  while (static_cast<int>(open_.size()) > limits_.total) {
    const int victim = pick(fd, "");
    if (victim < 0) break;
    const std::string victim_address = open_.at(victim).address;
    cut.push_back(Cut{victim, open_.at(victim).peer});
    open_.erase(victim);
    note_cut(victim_address, over(false), now);
  }
  return cut;
}

std::string ConnectionGuard::over(bool per_address) const {
  return fmt::format("over the limit of {} {} {}", per_address ? limits_.per_address : limits_.total,
                     limits_.young.count() > 0 ? "connections that may still be in their handshake" : "open connections",
                     per_address ? "per address" : "in all");
}

void ConnectionGuard::note_cut(const std::string& address, const std::string& why, Clock::time_point now) {
  ++cut_;
  if (reports_.size() >= kReportsKept && reports_.count(address) == 0)
    std::erase_if(reports_, [&](const auto& entry) { return now - entry.second.logged >= kLogEvery; });
  // Past kReportsKept addresses logged within the interval (a flood from a
  // network's worth of them), the rest share one report: the map stays bounded.
  const std::string& key =
      reports_.size() < kReportsKept || reports_.count(address) != 0 ? address : kOtherAddresses;
  Report& report = reports_[key];
  ++report.since_logged;
  if (now - report.logged < kLogEvery) return;
  spdlog::warn("{}: cut {} connection(s) from {}: {} ({} cut since it started)", where_, report.since_logged, key, why,
               cut_);
  report.since_logged = 0;
  report.logged = now;
}

void ConnectionGuard::accepted(int fd, Clock::time_point now) {
  const std::string address = socket_peer_address(fd, false);
  const std::string peer = socket_peer_address(fd, true);
  if (address.empty() || peer.empty()) return;  // already gone
  // A victim's descriptor may have been closed by ZeroMQ (its DISCONNECTED
  // not read yet) and reused: cut it only while it is the same connection.
  for (const Cut& victim : admit_peer(fd, address, peer, now))
    if (accepted_port(victim.fd) == port_ && socket_peer_address(victim.fd, true) == victim.peer)
      ::shutdown(victim.fd, SHUT_RDWR);
}

void ConnectionGuard::closed(int fd) { open_.erase(fd); }

void ConnectionGuard::set_admitted(std::vector<std::string> addresses) {
  if (limits_.admitted.empty() || addresses.empty()) return;
  limits_.admitted = std::move(addresses);
}

}  // namespace rill::comm
