#include "comm/tcp_link.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>

#include "comm/connection_guard.h"

namespace rill::comm {

uint16_t local_port_of(int fd) {
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (fd < 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return 0;
  if (local.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(local).sin_port);
  if (local.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(local).sin6_port);
  return 0;
}

std::optional<TcpLinkCounters> read_tcp_link(int fd, const std::string& peer, uint16_t local_port) {
  if (fd < 0 || local_port == 0 || local_port_of(fd) != local_port || socket_peer_address(fd) != peer)
    return std::nullopt;
  tcp_info info{};
  socklen_t len = sizeof info;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return std::nullopt;
  if (len < offsetof(tcp_info, tcpi_busy_time) + sizeof info.tcpi_busy_time) return std::nullopt;
  return TcpLinkCounters{static_cast<int64_t>(info.tcpi_bytes_acked), static_cast<int64_t>(info.tcpi_busy_time), 0};
}

}  // namespace rill::comm
