// What the master's HTTP endpoint (runtime/watch/http_server.h) answers,
// apart from any server: a request's method, path, query token and headers
// in; status, headers and body out.
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
// requests) or as that cookie; anything else gets 401 saying how. The token
// is the first thing looked at: a request without it reaches no route.
//
// Any thread; the board takes its own lock.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/watch/metrics_board.h"

namespace rill {

struct HttpRequest {
  std::string method;                      // "GET", "HEAD", ...
  std::string path;                        // without the query
  std::optional<std::string> query_token;  // ?token=...
  std::string authorization;               // the Authorization header ("" if none)
  std::string cookie;                      // the Cookie header ("" if none)
};

struct HttpAnswer {
  int status = 200;
  std::string content_type;
  std::string body;
  // A body that lives as long as the program (the compiled-in chart.js),
  // served without a copy; used when set.
  std::string_view static_body;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond Content-Type
};

HttpAnswer answer_http(MetricsBoard& board, const std::string& token, const HttpRequest& request);

}  // namespace rill
