// The master's HTTP endpoint, read-only: what a MetricsBoard holds, for
// Prometheus and for people (the routes and the token: runtime/watch/
// http_routes.h).
//
// It is served by libmicrohttpd's event-driven core (epoll, a few polling
// threads): a connection holds a descriptor and a small buffer, never a
// thread, however slowly it sends. What one client can hold is bounded:
//   - connections per client address (HttpLimits::per_address) and in all
//     (total): more are closed as they are accepted;
//   - a header deadline: a connection whose request headers are not all in
//     within header_deadline of its accept (or of its last answer, kept
//     alive) is closed, however steadily it trickles them;
//   - an idle timeout (no byte either way: a client that stops reading its
//     answer), and a bound on the bytes of a request's headers.
// So a flood of idle or slow connections from other addresses never keeps
// a token holder's request from an answer; one from the holder's own
// address is bounded by the deadline and the totals only (docs/SECURITY.md).
// cpp-httplib, which it replaces here, gives each connection a thread of a
// fixed pool from accept to its last byte, and reads headers with a timeout
// per read: a dozen slow clients held every thread.
//
// start() and the destructor are called from one thread; requests are
// answered on the server's own threads.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "base/status.h"
#include "runtime/watch/metrics_board.h"

namespace rill {

struct HttpLimits {
  int per_address = 16;                                  // open connections per client address
  int total = 128;                                       // open connections in all
  std::chrono::milliseconds header_deadline{5000};       // accept (or last answer) to the end of the headers
  std::chrono::seconds idle_timeout{10};                 // no byte either way (an answer not read)
  int threads = 4;                                       // polling threads (a slow plan drawing holds one)
};

class HttpServer {
 public:
  // Listens on address:port (port 0: one the kernel picks). Errors name the
  // address (a port in use, say).
  static StatusOr<std::unique_ptr<HttpServer>> start(const std::string& address, int port, MetricsBoard& board,
                                                      const std::string& token = "", HttpLimits limits = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  int port() const { return port_; }

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace rill
