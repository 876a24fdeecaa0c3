#include "runtime/cluster/http_server.h"

#include <httplib.h>

#include <fmt/format.h>

#include "runtime/cluster/chart_js.h"
#include "runtime/cluster/dashboard_html.h"

namespace rill {

StatusOr<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& address, int port,
                                                        MetricsBoard& board) {
  std::unique_ptr<HttpServer> http(new HttpServer());
  http->server_ = std::make_unique<httplib::Server>();
  httplib::Server& s = *http->server_;
  s.Get("/metrics", [&board](const httplib::Request&, httplib::Response& res) {
    res.set_content(board.prometheus_text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/api/status", [&board](const httplib::Request&, httplib::Response& res) {
    res.set_content(board.status_json(), "application/json");
  });
  s.Get(R"(/api/jobs/(\d{1,18}))", [&board](const httplib::Request& req, httplib::Response& res) {
    const std::string json = board.job_json(std::stoll(req.matches[1].str()));
    if (json.empty()) {
      res.status = 404;
      res.set_content(fmt::format(R"({{"error": "no job {}"}})", req.matches[1].str()), "application/json");
      return;
    }
    res.set_content(json, "application/json");
  });
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(graph::kDashboardHtml, "text/html; charset=utf-8");
  });
  s.Get("/static/chart.min.js", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(graph::kChartJs, "application/javascript");
  });
  s.Get(R"(/api/jobs/(\d{1,18})/plan.svg)", [&board](const httplib::Request& req, httplib::Response& res) {
    auto svg = board.job_plan_svg(std::stoll(req.matches[1].str()));
    if (!svg.ok()) {
      res.status = svg.status().code() == Code::kNotFound ? 404 : 503;
      res.set_content(svg.status().message(), "text/plain; charset=utf-8");
      return;
    }
    res.set_content(*svg, "image/svg+xml");
  });
  s.set_payload_max_length(1 << 16);  // it takes no uploads
  const int bound = port == 0 ? s.bind_to_any_port(address) : (s.bind_to_port(address, port) ? port : -1);
  if (bound < 0)
    return Status(Code::kUnavailable, fmt::format("HTTP: cannot listen on {}:{} (in use, or not an address of this "
                                                  "machine)",
                                                  address, port));
  http->port_ = bound;
  http->thread_ = std::thread([&s] { s.listen_after_bind(); });
  return http;
}

HttpServer::~HttpServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace rill
