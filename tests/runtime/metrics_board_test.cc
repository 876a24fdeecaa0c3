// MetricsBoard: what /metrics and /api serve, from what the agent reports.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/watch/metrics_board.h"

namespace rill {

TEST_CASE("the metrics board serves the node table, the running job's step and metrics, and its loss curve") {
  MetricsBoard board;
  MetricsBoard::Node up{0, "127.0.0.1:9988", "up (master)", 0.0, true, 80.5, 6.25, false};
  MetricsBoard::Node lost{1, "10.0.0.2:9988", "lost", 12.5, false, 0, 0, false};
  up.received_bytes_from = {0, 4096};
  lost.received_bytes_from = {1024, 0};
  board.publish_cluster({up, lost}, R"({"nodes": []})");
  board.job_started(3, "mlp \"quoted\"", R"({"name": "mlp"})", 100, 256);
  const std::vector<std::string> names = {"accuracy", "loss"};
  for (int64_t step = 0; step < 10; ++step) {
    const std::vector<double> values = {0.5, 2.0 - 0.1 * static_cast<double>(step)};
    board.job_step(3, step, names, values);
  }
  const std::string text = board.prometheus_text();
  CHECK(text.find("rill_node_up{node=\"0\",address=\"127.0.0.1:9988\"} 1\n") != std::string::npos);
  CHECK(text.find("rill_node_up{node=\"1\",address=\"10.0.0.2:9988\"} 0\n") != std::string::npos);
  CHECK(text.find("rill_node_heartbeat_age_seconds{node=\"1\"} 12.5\n") != std::string::npos);
  CHECK(text.find("rill_node_steps_per_second{node=\"0\"} 80.5\n") != std::string::npos);
  CHECK(text.find("rill_node_steps_per_second{node=\"1\"}") == std::string::npos);  // no pace: no sample
  CHECK(text.find("rill_job_step{job=\"3\",name=\"mlp \\\"quoted\\\"\"} 10\n") != std::string::npos);
  CHECK(text.find("metric=\"loss\"} 1.1") != std::string::npos);
  CHECK(text.find("# TYPE rill_job_metric gauge\n") != std::string::npos);

  auto job = nlohmann::json::parse(board.job_json(3));
  CHECK(job["step"] == 10);
  CHECK(job["state"] == "running");
  CHECK(job["config"]["name"] == "mlp");
  REQUIRE(job["loss_curve"].size() == 10);
  CHECK(job["loss_curve"][0][0] == 1);
  CHECK(job["loss_curve"][0][1] == 2.0);
  CHECK(job["curves"]["names"] == nlohmann::json({"accuracy", "loss"}));
  CHECK(job["curves"]["points"][0] == nlohmann::json({1, 0.5, 2.0}));
  CHECK(job["traffic_bytes"] == nlohmann::json({{0, 1024}, {4096, 0}}));  // [from][to]
  CHECK(board.job_json(4).empty());

  board.job_finished(3, false, "node 1 lost");
  CHECK(nlohmann::json::parse(board.job_json(3))["error"] == "node 1 lost");
  const std::string after = board.prometheus_text();
  CHECK(after.find("rill_job_step{") == std::string::npos);  // nothing runs
  CHECK(after.find("rill_jobs_finished_total{outcome=\"failed\"} 1\n") != std::string::npos);
  auto status = nlohmann::json::parse(board.status_json());
  CHECK(status["jobs"][0]["state"] == "failed");
}

TEST_CASE("a long run's loss curve is thinned to a bound, evenly, and NaN is written as Prometheus spells it") {
  MetricsBoard board;
  board.job_started(1, "long", "{}", 100000, 1);
  const std::vector<std::string> names = {"loss"};
  for (int64_t step = 0; step < 100000; ++step) {
    const std::vector<double> values = {step == 99999 ? std::numeric_limits<double>::quiet_NaN() : 1.0};
    board.job_step(1, step, names, values);
  }
  auto job = nlohmann::json::parse(board.job_json(1));
  CHECK(job["loss_curve"].size() <= MetricsBoard::kCurvePoints);
  CHECK(job["loss_curve"].size() >= MetricsBoard::kCurvePoints / 4);
  CHECK(job["loss_curve"][1][0].get<int64_t>() - job["loss_curve"][0][0].get<int64_t>() ==
        job["loss_curve"][2][0].get<int64_t>() - job["loss_curve"][1][0].get<int64_t>());
  CHECK(board.prometheus_text().find("metric=\"loss\"} NaN\n") != std::string::npos);
}

}  // namespace rill
