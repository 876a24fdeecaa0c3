#include "comm/tcp_link.h"

#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>

namespace rill::comm {

std::optional<TcpLinkCounters> read_tcp_link(int fd, uint16_t peer_port) {
  if (fd < 0) return std::nullopt;
  sockaddr_storage peer{};
  socklen_t peer_len = sizeof peer;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return std::nullopt;
  uint16_t port = 0;
  if (peer.ss_family == AF_INET) port = ntohs(reinterpret_cast<const sockaddr_in&>(peer).sin_port);
  else if (peer.ss_family == AF_INET6) port = ntohs(reinterpret_cast<const sockaddr_in6&>(peer).sin6_port);
  else return std::nullopt;
  if (port != peer_port) return std::nullopt;
  tcp_info info{};
  socklen_t len = sizeof info;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return std::nullopt;
  if (len < offsetof(tcp_info, tcpi_busy_time) + sizeof info.tcpi_busy_time) return std::nullopt;
  return TcpLinkCounters{static_cast<int64_t>(info.tcpi_bytes_acked), static_cast<int64_t>(info.tcpi_busy_time)};
}

}  // namespace rill::comm
