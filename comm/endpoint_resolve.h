// Resolving a data endpoint (address, port) to the ZeroMQ TCP address that
// binds or connects to it. Internal to comm/; a pure function, any thread.
#pragma once

#include <string>

#include "comm/transport.h"

namespace rill::comm {

struct ResolvedEndpoint {
  std::string url;    // "tcp://127.0.0.1:9989", "tcp://[::1]:9989"
  bool ipv6 = false;  // the socket needs ZMQ_IPV6
};

// Host names resolve to their first IPv4 address (else IPv6). `rank` names
// the endpoint in errors.
StatusOr<ResolvedEndpoint> resolve_endpoint(const Endpoint& endpoint, int rank);

}  // namespace rill::comm
