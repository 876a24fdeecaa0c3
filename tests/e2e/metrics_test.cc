// The master's HTTP endpoint on real agents: /metrics (checked by Prometheus's
// own promtool), /api/status and /api/jobs/ID, scraped while a job runs, and
// the page at / opened in headless Chromium (a screenshot is left in the
// build folder as dashboard.png). And a cluster job's timeline (--trace),
// and a straggler named.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <signal.h>
#include <sched.h>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "key_util.h"
#include "process_util.h"

#include "runtime/cluster/client.h"

namespace {

using rill::testing::Agent;
using rill::testing::read_text;
using rill::testing::root;

// rill_job_step's value in a scrape, or -1.
double job_step(const std::string& metrics) {
  std::smatch m;
  static const std::regex step(R"(\nrill_job_step\{[^}]*\} ([0-9.e+]+)\n)");
  return std::regex_search(metrics, m, step) ? std::stod(m[1].str()) : -1;
}

}  // namespace

// A keyed cluster, as `rill run --nodes` makes: the endpoint wants the
// cluster's token (a bearer header here, the address with it in Chromium).
TEST_CASE("the master serves Prometheus metrics and JSON status that move while a job runs") {
  auto dir = rill::testing::temp_dir("rill-metrics-");
  const std::string key = (dir / "cluster.key").string();
  REQUIRE(rill::testing::run_rill("keygen " + key + " --force").code == 0);
  ::setenv("RILL_KEY_FILE", key.c_str(), 1);  // the agents, the client and `rill token` read it
  struct Unset {
    ~Unset() { ::unsetenv("RILL_KEY_FILE"); }
  } unset;  // however the test ends
  const std::string token = rill::testing::run_rill("token").output.substr(0, 32);
  const std::string machines = "127.0.0.1:19420,127.0.0.2:19420";
  Agent master("--machines " + machines + " --rank 0 --http 127.0.0.1:19425", (dir / "h0.log").string());
  Agent node("--machines " + machines + " --rank 1", (dir / "h1.log").string());
  rill::testing::wait_formed("127.0.0.1:19420", "");  // `rill token --master` below asks once
  auto client = rill::Client::connect("127.0.0.1:19420", 30);
  REQUIRE(client.ok());
  std::thread job([&] {
    rill::SubmitOptions options;
    options.steps = 20000;  // stopped below, once every page was read while it ran
    auto result = (*client)->submit_text(read_text(root() + "/samples/mlp/mlp.json"), "mlp.json", options);
    CHECK(result.ok());
  });
  httplib::Client http("127.0.0.1", 19425);
  http.set_bearer_token_auth(token);
  // Asked, the master says where it serves (not the default 8265).
  const rill::testing::Ran where = rill::testing::run_rill("token --master 127.0.0.1:19420");
  INFO(where.output);
  CHECK(where.output.find("http://127.0.0.1:19425/?token=" + token) != std::string::npos);
  std::string first;
  for (int i = 0; i < 300 && job_step(first) < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto res = http.Get("/metrics");
    if (res && res->status == 200) first = res->body;
  }
  REQUIRE(job_step(first) >= 1);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  auto second = http.Get("/metrics");
  REQUIRE(second);
  INFO(second->body);
  CHECK(job_step(second->body) > job_step(first));  // the figures move
  CHECK(second->body.find("rill_node_up{node=\"0\",address=\"127.0.0.1:19420\"} 1") != std::string::npos);
  CHECK(second->body.find("rill_node_up{node=\"1\",address=\"127.0.0.2:19420\"} 1") != std::string::npos);
  CHECK(second->body.find("rill_job_metric{job=\"1\",name=\"mlp\",metric=\"loss\"}") != std::string::npos);
  CHECK(second->get_header_value("Content-Type").find("text/plain; version=0.0.4") == 0);
  const auto scraped = dir / "metrics.txt";
  std::ofstream(scraped) << second->body;
  auto checked = rill::testing::run_shell("promtool check metrics < " + scraped.string());
  INFO(checked.output);
  CHECK(checked.code == 0);

  // Each node's threads and received bytes come with its heartbeats (every second).
  std::string activity;
  for (int i = 0; i < 100 && activity.find("rill_thread_acts{node=\"1\",thread=\"cpu0.0\"}") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (auto res = http.Get("/metrics")) activity = res->body;
  }
  INFO(activity);
  CHECK(activity.find("rill_thread_acts{node=\"1\",thread=\"cpu0.0\"}") != std::string::npos);
  CHECK(activity.find("rill_thread_busy_seconds{node=\"0\",thread=\"cpu0.0\"}") != std::string::npos);
  CHECK(activity.find("rill_thread_queued_messages{node=\"1\",thread=\"cpu0.0\"}") != std::string::npos);
  std::smatch bytes;
  REQUIRE(std::regex_search(activity, bytes, std::regex(R"(rill_node_received_bytes\{node="0",from="1"\} ([0-9.e+]+))")));
  CHECK(std::stod(bytes[1].str()) > 0);  // gradients cross every step

  auto status = http.Get("/api/status");
  REQUIRE(status);
  auto s = nlohmann::json::parse(status->body);
  REQUIRE(s["nodes"].size() == 2);
  CHECK(s["nodes"][1]["state"] == "up");
  CHECK(s["running"]["job_id"] == 1);
  auto detail = http.Get("/api/jobs/1");
  REQUIRE(detail);
  auto j = nlohmann::json::parse(detail->body);
  CHECK(j["name"] == "mlp");
  CHECK(j["config"]["name"] == "mlp");
  CHECK(j["loss_curve"].size() >= 1);
  CHECK(j["curves"]["names"] == nlohmann::json({"loss", "accuracy"}));  // the sink's order
  CHECK(j["traffic_bytes"].size() == 2);
  CHECK(http.Get("/api/jobs/99")->status == 404);
  auto plan = http.Get("/api/jobs/1/plan.svg");  // the whole plan, drawn by Graphviz
  REQUIRE(plan);
  CHECK(plan->status == 200);
  CHECK(plan->get_header_value("Content-Type") == "image/svg+xml");
  CHECK(plan->body.find("<svg") != std::string::npos);

  // The page, in headless Chromium (Debian's), while the job runs: its loss
  // curve has points, its node table lists both nodes, and no script failed.
  const std::string chromium = "chromium --headless=new --no-sandbox --disable-gpu --virtual-time-budget=3000 ";
  // Opened with the token once, the page's own requests carry its cookie.
  const std::string page = "http://127.0.0.1:19425/?token=" + token;
  auto dom = rill::testing::run_shell(chromium + "--dump-dom " + page + " 2>/dev/null");
  INFO(dom.output);
  REQUIRE(dom.code == 0);
  std::smatch points;
  REQUIRE(std::regex_search(dom.output, points, std::regex(R"(<div id="points"[^>]*>(\d+)</div>)")));
  CHECK(std::stoi(points[1].str()) > 0);
  CHECK(dom.output.find("<td>127.0.0.1:19420</td><td>up (master)</td>") != std::string::npos);
  CHECK(dom.output.find("<td>127.0.0.2:19420</td><td>up</td>") != std::string::npos);
  CHECK(dom.output.find("<div id=\"errors\"></div>") != std::string::npos);
  // The page came with the master's state and drew it before any poll.
  CHECK(dom.output.find("data-first-render=\"embedded\"") != std::string::npos);
  auto served = http.Get("/");
  REQUIRE(served);
  CHECK(served->body.find("RILL_INITIAL_STATE") == std::string::npos);
  CHECK(served->body.find("\"address\":\"127.0.0.2:19420\"") != std::string::npos);
  CHECK(served->body.find("\"job\": {\"job_id\":1,") != std::string::npos);
  CHECK(dom.output.find("<img id=\"plan\" alt=\"\" style=\"max-width: 100%\" src=\"/api/jobs/1/plan.svg\">") !=
        std::string::npos);
  const auto shot = std::filesystem::path(rill::testing::binary()).parent_path() / "dashboard.png";
  std::filesystem::remove(shot);
  auto screenshot = rill::testing::run_shell(chromium + "--window-size=1280,800 --screenshot=" + shot.string() +
                                             " " + page + " 2>&1");
  INFO(screenshot.output);
  CHECK(screenshot.code == 0);
  CHECK(std::filesystem::file_size(shot) > 10000);
  // A job stopped early (rill stop) is interrupted, not done, as rill status says...
  const bool stopped = rill::testing::run_rill("stop --master 127.0.0.1:19420 --job 1").code == 0;
  CHECK(stopped);
  if (!stopped) (void)rill::testing::run_rill("stop --now --master 127.0.0.1:19420");
  job.join();
  auto one = nlohmann::json::parse(http.Get("/api/jobs/1")->body);
  CHECK(one["state"] == "interrupted");
  CHECK(one["step"].get<int64_t>() < 20000);
  // ...and one that ran its steps is done.
  rill::SubmitOptions twenty;
  twenty.steps = 20;
  auto ran = (*client)->submit_text(read_text(root() + "/samples/mlp/mlp.json"), "mlp.json", twenty);
  REQUIRE(ran.ok());
  CHECK(ran->status.ok());
  auto done = nlohmann::json::parse(http.Get("/api/jobs/2")->body);
  CHECK(done["state"] == "done");
  CHECK(done["step"] == 20);
  // Without the token the browser gets the 401 and how to get it.
  auto refused = rill::testing::run_shell(chromium + "--dump-dom http://127.0.0.1:19425/ 2>/dev/null");
  CHECK(refused.output.find("needs its token: `rill token --key FILE` prints it") != std::string::npos);
  (void)(*client)->shutdown();
  CHECK(master.wait(15) == 0);
}

// A cluster job's timeline: each node records its acts and sends them back
// with its part's end; the client writes one Chrome trace with a process per
// node, each node's times from its own first act (other machines' clocks do
// not compare). The gradients' all-reduce is there on both nodes.
TEST_CASE("rill run --nodes 2 --trace writes one timeline of every node's acts") {
  auto dir = rill::testing::temp_dir("rill-trace-");
  const std::string trace = (dir / "trace.json").string();
  auto ran = rill::testing::run_rill("run " + root() + "/samples/mlp/mlp.json --nodes 2 --devices cpu:1 --ctrl-port "
                                     "19870 --steps 10 --trace " + trace);
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  CHECK(ran.output.find("trace of job 1 written to " + trace) != std::string::npos);
  auto events = nlohmann::json::parse(read_text(trace))["traceEvents"];
  std::map<int, std::set<int64_t>> steps;    // per node
  std::map<int, int> boxings;                // acts of the gradients' all-reduce (a bucket, or one boxing) per node
  std::map<int, double> first;               // earliest act per node
  for (const auto& e : events) {
    if (e["ph"] != "X") continue;
    const int node = e["pid"].get<int>();
    steps[node].insert(e["args"]["step"].get<int64_t>());
    const std::string name = e["name"].get<std::string>();
    if (name.rfind("bucket:grad/", 0) == 0 || name.rfind("boxing:grad/", 0) == 0) ++boxings[node];
    first[node] = first.count(node) ? std::min(first[node], e["ts"].get<double>()) : e["ts"].get<double>();
  }
  REQUIRE(steps.size() == 2);
  for (int node : {0, 1}) {
    CAPTURE(node);
    CHECK(steps[node].size() == 10);
    CHECK(boxings[node] >= 10);
    CHECK(first[node] == 0.0);
  }
}

// A straggler: node 1 shares its core with a process that spins, node 0
// has a core of its own. In a data-parallel job both run at node 1's step
// rate, but node 1's device computes about twice as long per step (measured
// 11.9 ms against 6.4 ms for the MLP): the master's status names it slow
// (1.5x the others' median or more), and its log says so once; node 0 is
// never named.
TEST_CASE("the master names a node that computes much longer per step than the others") {
  // Two of the CPUs this process may run on (a container's or a cgroup's
  // set need not hold CPUs 0 and 1).
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu)
      if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  if (cpus.size() < 2) {
    MESSAGE("skipped: needs two CPUs to run on");
    return;
  }
  auto dir = rill::testing::temp_dir("rill-straggler-");
  const std::string machines = "--machines 127.0.0.1:19660,127.0.0.2:19660 --join-timeout 20";
  Agent master(machines + " --rank 0", (dir / "s0.log").string(), "taskset -c " + std::to_string(cpus[0]));
  Agent slow(machines + " --rank 1", (dir / "s1.log").string(), "taskset -c " + std::to_string(cpus[1]));
  const pid_t spinner = fork();
  if (spinner == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[1], &one);
    sched_setaffinity(0, sizeof one, &one);
    for (volatile uint64_t i = 0;; i = i + 1) {
    }
  }
  auto client = rill::Client::connect("127.0.0.1:19660", 30);
  REQUIRE(client.ok());
  std::atomic<bool> done{false};
  std::thread job([&] {
    auto c = rill::Client::connect("127.0.0.1:19660", 30);
    rill::SubmitOptions options;
    options.overrides = {"train.epochs=3"};
    if (c.ok()) (void)(*c)->submit_text(read_text(root() + "/samples/mlp/mlp.json"), "mlp.json", options);
    done = true;
  });
  std::set<int> named;
  bool paced = false;
  while (!done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto status = (*client)->status();
    if (!status.ok()) continue;
    auto j = nlohmann::json::parse(*status);
    for (const auto& r : j["slow_nodes"]) named.insert(r.get<int>());
    paced = paced || j["nodes"][1].contains("busy_ms_per_step");
  }
  job.join();
  kill(spinner, SIGKILL);
  waitpid(spinner, nullptr, 0);
  INFO(master.output());
  CHECK(paced);
  CHECK(named == std::set<int>{1});
  CHECK(master.output().find("node 1 (127.0.0.2:19660) is slow") != std::string::npos);
  CHECK(master.output().find("node 0 (127.0.0.1:19660) is slow") == std::string::npos);
  rill::testing::Ran status = rill::testing::run_rill("status --master 127.0.0.1:19660");
  CHECK(status.output.find("device ms/step") != std::string::npos);
  (void)(*client)->shutdown();
  CHECK(master.wait(15) == 0);
}
