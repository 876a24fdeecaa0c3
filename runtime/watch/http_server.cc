#include "runtime/watch/http_server.h"

#include <atomic>
#include <chrono>
#include <memory>

#include <httplib.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/watch/chart_js.h"
#include "runtime/watch/dashboard_html.h"

namespace rill {
namespace {

constexpr std::string_view kCookie = "rill_token";

// Compares in time independent of where they differ (the length is no secret).
bool same_token(std::string_view given, std::string_view token) {
  if (given.size() != token.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ token[i]);
  return diff == 0;
}

// The value of cookie `name` in a Cookie header ("a=1; rill_token=..."), or "".
std::string_view cookie(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    const size_t end = std::min(header.find(';'), header.size());
    std::string_view pair = header.substr(0, end);
    header.remove_prefix(std::min(end + 1, header.size()));
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    if (pair.size() > name.size() && pair.substr(0, name.size()) == name && pair[name.size()] == '=')
      return pair.substr(name.size() + 1);
  }
  return {};
}

// The dashboard with the board's state in it ({"status": ..., "job": the
// last job's}), so that its first render needs no poll. "</" in the JSON is
// written "<\/" (the same JSON), so nothing in it ends the script element.
std::string dashboard_page(const MetricsBoard& board) {
  const std::string status = board.status_json();
  std::string job = "null";
  const auto parsed = nlohmann::json::parse(status, nullptr, false);
  if (!parsed.is_discarded() && parsed.contains("jobs") && parsed["jobs"].is_array() && !parsed["jobs"].empty()) {
    const std::string last = board.job_json(parsed["jobs"].back()["job_id"].get<int64_t>());
    if (!last.empty()) job = last;
  }
  std::string state = "{\"status\": " + status + ", \"job\": " + job + "}";
  for (size_t at = state.find("</"); at != std::string::npos; at = state.find("</", at + 3)) state.insert(at + 1, "\\");
  std::string page(graph::kDashboardHtml);
  constexpr std::string_view kSlot = "RILL_INITIAL_STATE";
  if (const size_t at = page.find(kSlot); at != std::string::npos) page.replace(at, kSlot.size(), state);
  return page;
}

}  // namespace

StatusOr<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& address, int port, MetricsBoard& board,
                                                        const std::string& token) {
  std::unique_ptr<HttpServer> http(new HttpServer());
  http->server_ = std::make_unique<httplib::Server>();
  httplib::Server& s = *http->server_;
  if (!token.empty())
    s.set_pre_routing_handler([token](const httplib::Request& req, httplib::Response& res) {
      const std::string authorization = req.get_header_value("Authorization");
      const bool in_query = req.has_param("token");
      const std::string cookies = req.get_header_value("Cookie");
      std::string_view given = cookie(cookies, kCookie);
      if (authorization.rfind("Bearer ", 0) == 0) given = std::string_view(authorization).substr(7);
      const std::string query = in_query ? req.get_param_value("token") : std::string();
      if (in_query) given = query;
      if (same_token(given, token)) {
        if (in_query)
          res.set_header("Set-Cookie", fmt::format("{}={}; Path=/; HttpOnly; SameSite=Strict", kCookie, token));
        return httplib::Server::HandlerResponse::Unhandled;
      }
      res.status = 401;
      res.set_header("WWW-Authenticate", R"(Bearer realm="rill")");
      res.set_content(given.empty() ? "this cluster's HTTP endpoint needs its token: `rill token --key FILE` prints "
                                      "it; send it as 'Authorization: Bearer TOKEN', or open /?token=TOKEN once\n"
                                    : "this is not the cluster's token (`rill token --key FILE` prints it)\n",
                      "text/plain; charset=utf-8");
      return httplib::Server::HandlerResponse::Handled;
    });
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
  s.Get("/", [&board](const httplib::Request&, httplib::Response& res) {
    res.set_content(dashboard_page(board), "text/html; charset=utf-8");
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
  // SO_REUSEADDR (not httplib's SO_REUSEPORT): an agent restarted on its
  // port binds again while the last one's connections linger in TIME-WAIT,
  // and a port another process listens on is still refused.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  const int bound = port == 0 ? s.bind_to_any_port(address) : (s.bind_to_port(address, port) ? port : -1);
  if (bound < 0)
    return Status(Code::kUnavailable, fmt::format("HTTP: cannot listen on {}:{} (in use, or not an address of this "
                                                  "machine)",
                                                  address, port));
  http->port_ = bound;
  auto ended = std::make_shared<std::atomic<bool>>(false);
  http->thread_ = std::thread([&s, ended] {
    s.listen_after_bind();
    ended->store(true);
  });
  // Running before it is handed out: httplib's stop() does nothing to a
  // server not yet listening, so one stopped at once would listen forever.
  while (!s.is_running() && !ended->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return http;
}

HttpServer::~HttpServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace rill
