// What the kernel counts on one TCP connection, read through TCP_INFO: the
// bytes the peer acknowledged and the time the connection had bytes not yet
// acknowledged (tcpi_busy_time: sending, or held back by the peer's window
// or the send buffer). Their ratio over an interval is the rate the link
// carried while there was something to carry, whatever the idle time
// between bursts: the master's slow-link report (runtime/watch/link_pace.h)
// compares it between nodes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace rill::comm {

struct TcpLinkCounters {
  int64_t bytes_acked = 0;
  int64_t busy_us = 0;
  // Which connection they count (when it came up, on the reader's steady
  // clock): a connection made again starts its counters over, so counts of
  // two connections are never subtracted.
  int64_t connection = 0;
};

// What one node's connection to `peer` carried while busy, MB/s (over a
// window of its counters: runtime/watch/link_pace.h).
struct PeerRate {
  int peer = 0;
  double mb_per_s = 0;
};

// The counters of the TCP socket `fd` if it is the connection from local
// port `local_port` to `peer` ("10.0.0.2:9989", "[::1]:9989", as
// socket_peer_address writes it: comm/connection_guard.h): a descriptor the
// socket library closed and reused, for another peer or another connection
// to the same one, is not read. nullopt otherwise, or when the kernel is too
// old to count busy time (before Linux 4.10).
std::optional<TcpLinkCounters> read_tcp_link(int fd, const std::string& peer, uint16_t local_port);

// The local port of a TCP socket; 0 when it has none.
uint16_t local_port_of(int fd);

}  // namespace rill::comm
