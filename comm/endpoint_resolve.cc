#include <arpa/inet.h>
#include <malloc.h>
#include <netdb.h>
#include <sys/socket.h>

#include "comm/endpoint_resolve.h"

namespace rill::comm {

StatusOr<ResolvedEndpoint> resolve_endpoint(const Endpoint& endpoint, int rank) {
  if (endpoint.port < 1 || endpoint.port > 65535) {
    return invalid_argument("rank {}: port {} of address '{}' is not in 1..65535", rank, endpoint.port,
                            endpoint.address);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = endpoint.address.empty() ? EAI_NONAME : getaddrinfo(endpoint.address.c_str(), nullptr, &hints, &found);
  if (rc != 0) {
    return invalid_argument("rank {}: cannot parse or resolve address '{}': {}", rank, endpoint.address,
                            gai_strerror(rc));
  }
  const addrinfo* pick = found;
  for (const addrinfo* a = found; a; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  char host[INET6_ADDRSTRLEN] = {};
  ResolvedEndpoint out;
  if (pick->ai_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(pick->ai_addr)->sin_addr, host, sizeof host);
    out.url = fmt::format("tcp://{}:{}", host, endpoint.port);
  } else {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(pick->ai_addr)->sin6_addr, host, sizeof host);
    out.url = fmt::format("tcp://[{}]:{}", host, endpoint.port);
    out.ipv6 = true;
  }
  freeaddrinfo(found);
  return out;
}

// Declared in transport.h: process-level set-up for the ZeroMQ transport.
bool keep_large_buffers_mapped() {
#ifdef __GLIBC__
  // Blocks up to 32 MiB (glibc's largest threshold) come from the heap, and
  // up to 256 MiB of freed heap top stays mapped.
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1;
#else
  return false;
#endif
}

}  // namespace rill::comm
