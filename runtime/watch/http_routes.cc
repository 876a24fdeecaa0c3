#include "runtime/watch/http_routes.h"

#include <algorithm>
#include <cstdint>

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

HttpAnswer text(int status, std::string body, std::string content_type = "text/plain; charset=utf-8") {
  HttpAnswer answer;
  answer.status = status;
  answer.content_type = std::move(content_type);
  answer.body = std::move(body);
  return answer;
}

// "/api/jobs/ID" or "/api/jobs/ID/plan.svg" (ID: 1 to 18 digits): the id
// and whether it asks for the plan; none for any other path.
std::optional<std::pair<int64_t, bool>> job_path(std::string_view path) {
  constexpr std::string_view kPrefix = "/api/jobs/";
  if (path.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  path.remove_prefix(kPrefix.size());
  const size_t digits = std::min(path.find_first_not_of("0123456789"), path.size());
  if (digits == 0 || digits > 18) return std::nullopt;
  const std::string_view rest = path.substr(digits);
  if (!rest.empty() && rest != "/plan.svg") return std::nullopt;
  int64_t id = 0;
  for (size_t i = 0; i < digits; ++i) id = id * 10 + (path[i] - '0');
  return std::make_pair(id, !rest.empty());
}

}  // namespace

HttpAnswer answer_http(MetricsBoard& board, const std::string& token, const HttpRequest& request) {
  // The token first: without it, nothing below is looked at.
  std::string set_cookie;
  if (!token.empty()) {
    std::string_view given = cookie(request.cookie, kCookie);
    if (request.authorization.rfind("Bearer ", 0) == 0) given = std::string_view(request.authorization).substr(7);
    if (request.query_token) given = *request.query_token;
    if (!same_token(given, token)) {
      HttpAnswer refused =
          text(401, given.empty() ? "this cluster's HTTP endpoint needs its token: `rill token --key FILE` prints it; "
                                    "send it as 'Authorization: Bearer TOKEN', or open /?token=TOKEN once\n"
                                  : "this is not the cluster's token (`rill token --key FILE` prints it)\n");
      refused.headers.emplace_back("WWW-Authenticate", R"(Bearer realm="rill")");
      return refused;
    }
    if (request.query_token) set_cookie = fmt::format("{}={}; Path=/; HttpOnly; SameSite=Strict", kCookie, token);
  }
  HttpAnswer answer;
  if (request.method != "GET" && request.method != "HEAD") {
    answer = text(405, "this endpoint is read-only: GET and HEAD only\n");
    answer.headers.emplace_back("Allow", "GET, HEAD");
  } else if (request.path == "/metrics") {
    answer = text(200, board.prometheus_text(), "text/plain; version=0.0.4; charset=utf-8");
  } else if (request.path == "/api/status") {
    answer = text(200, board.status_json(), "application/json");
  } else if (request.path == "/") {
    answer = text(200, dashboard_page(board), "text/html; charset=utf-8");
  } else if (request.path == "/static/chart.min.js") {
    answer = text(200, "", "application/javascript");
    answer.static_body = graph::kChartJs;
  } else if (auto job = job_path(request.path); job && !job->second) {
    const std::string json = board.job_json(job->first);
    answer = json.empty() ? text(404, fmt::format(R"({{"error": "no job {}"}})", job->first), "application/json")
                          : text(200, json, "application/json");
  } else if (job) {
    auto svg = board.job_plan_svg(job->first);
    answer = svg.ok() ? text(200, std::move(*svg), "image/svg+xml")
                      : text(svg.status().code() == Code::kNotFound ? 404 : 503, svg.status().message());
  } else {
    answer = text(404, "no such page: /, /metrics, /api/status and /api/jobs/ID are served\n");
  }
  if (!set_cookie.empty()) answer.headers.emplace_back("Set-Cookie", set_cookie);
  return answer;
}

}  // namespace rill
