// The master's HTTP endpoint (cpp-httplib), read-only: what a MetricsBoard
// holds, for Prometheus and for people.
//   GET /metrics       Prometheus text format
//   GET /api/status    the cluster (nodes, health, pace) and its jobs, JSON
//   GET /api/jobs/ID   one job: state, metrics, loss curve, config, JSON
//   GET /              a page drawing those live (runtime/watch/dashboard.html,
//                      with Debian's chart.js, both compiled in)
//   GET /api/jobs/ID/plan.svg  the job's plan, drawn by Graphviz's dot
// Nothing it serves changes the cluster. Given a token (a keyed cluster's,
// comm::http_token), it answers only requests that carry it: as
// `Authorization: Bearer TOKEN` (Prometheus, curl), as `?token=TOKEN` (a
// browser's first visit, which then gets it as a cookie for the page's own
// requests) or as that cookie; anything else gets 401 saying how.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "base/status.h"
#include "runtime/watch/metrics_board.h"

namespace httplib {
class Server;
}

namespace rill {

class HttpServer {
 public:
  // Listens on address:port (port 0: one the kernel picks) on a thread of
  // its own. Errors name the address (a port in use, say).
  static StatusOr<std::unique_ptr<HttpServer>> start(const std::string& address, int port, MetricsBoard& board,
                                                      const std::string& token = "");
  ~HttpServer();
  int port() const { return port_; }

 private:
  HttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace rill
