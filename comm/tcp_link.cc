#include "comm/tcp_link.h"

#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>

namespace rill::comm {

namespace {

uint16_t port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return 0;
}

}  // namespace

uint16_t local_port_of(int fd) {
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (fd < 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return 0;
  return port_of(local);
}

std::optional<TcpLinkCounters> read_tcp_link(int fd, const std::string& peer_address, uint16_t peer_port,
                                             uint16_t local_port) {
  if (fd < 0 || local_port == 0 || local_port_of(fd) != local_port) return std::nullopt;
  sockaddr_storage peer{};
  socklen_t peer_len = sizeof peer;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return std::nullopt;
  char address[INET6_ADDRSTRLEN] = {};
  uint16_t port = 0;
  if (peer.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(peer);
    port = ntohs(in.sin_port);
    inet_ntop(AF_INET, &in.sin_addr, address, sizeof address);
  } else if (peer.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(peer);
    port = ntohs(in6.sin6_port);
    inet_ntop(AF_INET6, &in6.sin6_addr, address, sizeof address);
  } else {
    return std::nullopt;
  }
  if (port != peer_port || peer_address != address) return std::nullopt;
  tcp_info info{};
  socklen_t len = sizeof info;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return std::nullopt;
  if (len < offsetof(tcp_info, tcpi_busy_time) + sizeof info.tcpi_busy_time) return std::nullopt;
  return TcpLinkCounters{static_cast<int64_t>(info.tcpi_bytes_acked), static_cast<int64_t>(info.tcpi_busy_time), 0};
}

std::string url_address(const std::string& url) {
  std::string rest = url.rfind("tcp://", 0) == 0 ? url.substr(6) : url;
  rest = rest.substr(0, rest.rfind(':'));
  if (rest.size() >= 2 && rest.front() == '[' && rest.back() == ']') rest = rest.substr(1, rest.size() - 2);
  return rest;
}

}  // namespace rill::comm
