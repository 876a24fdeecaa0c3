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

namespace rill::comm {

struct TcpLinkCounters {
  int64_t bytes_acked = 0;
  int64_t busy_us = 0;
};

// The counters of the TCP socket `fd` if it is connected to a peer at port
// `peer_port` (a descriptor the socket library closed and the process reused
// for something else is not read); nullopt otherwise, or when the kernel is
// too old to count busy time (before Linux 4.10).
std::optional<TcpLinkCounters> read_tcp_link(int fd, uint16_t peer_port);

}  // namespace rill::comm
