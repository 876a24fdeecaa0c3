// Agents of one process for the control-plane tests: in-process control
// channels (runtime/cluster/inproc_control_channel.h) and data transports,
// each agent on a clock of its own that only the test moves, a client of
// the master, and the waits those tests share.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/transport.h"
#include "runtime/cluster/agent.h"
#include "runtime/cluster/control_codec.h"
#include "runtime/cluster/inproc_control_channel.h"
#include "tests/runtime/sample_jobs.h"

namespace rill::testing::inproc {

namespace ctl = control;
using namespace std::chrono_literals;

// Time that passes only when the test says so.
class FakeClock final : public AgentClock {
 public:
  std::chrono::steady_clock::time_point now() const override {
    return start_ + std::chrono::nanoseconds(offset_ns_.load());
  }
  void advance(double seconds) { offset_ns_ += static_cast<int64_t>(seconds * 1e9); }

 private:
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::atomic<int64_t> offset_ns_{0};
};

// `world` agents of one process, each on its own thread and clock.
class Cluster {
 public:
  explicit Cluster(int world, size_t queue_capacity = 0)
      : hub_(std::make_shared<InprocControlHub>(queue_capacity)), data_(comm::make_inproc_transports(world)) {
    for (int r = 0; r < world; ++r) {
      clocks_.push_back(std::make_shared<FakeClock>());
      AgentOptions o;
      for (int m = 0; m < world; ++m) o.machines.push_back({"127.0.0.1", 19900 + 10 * m});
      o.rank = r;
      o.http = "off";
      o.heartbeat_s = 1;
      o.dead_after_s = 10;
      o.join_timeout_s = 30;
      o.control_channel = [hub = hub_, r] { return hub->channel(r); };
      o.data_transport = [this, r] { return std::move(data_[static_cast<size_t>(r)]); };
      o.clock = clocks_.back();
      options_.push_back(std::move(o));
    }
    results_.resize(static_cast<size_t>(world));
  }
  // A test that stopped half way (a failed REQUIRE) still ends its agents:
  // asked to shut down, and time passing for the ones the master cannot
  // reach, so their liveness checks end them.
  ~Cluster() {
    if (done_.load() < static_cast<int>(threads_.size())) {
      InprocControlHub::Client cleanup = hub_->client(0, "cleanup");
      // Retried while the master's inbox is full (queues of one message): a
      // lost Shutdown would leave join() below waiting on the agents.
      for (int tries = 0; tries < 5000 && cleanup.send(control::encode(control::Shutdown{})) ==
                                              ControlChannel::Sent::kFull;
           ++tries)
        std::this_thread::sleep_for(1ms);
      for (int turn = 0; turn < 2000 && done_.load() < static_cast<int>(threads_.size()); ++turn) {
        tick(100);
        std::this_thread::sleep_for(5ms);
      }
    }
    join();
  }

  AgentOptions& options(int rank) { return options_[static_cast<size_t>(rank)]; }
  FakeClock& clock(int rank) { return *clocks_[static_cast<size_t>(rank)]; }
  InprocControlHub& hub() { return *hub_; }

  void start(int rank) {
    threads_.emplace_back([this, rank] {
      results_[static_cast<size_t>(rank)] = run_agent(options_[static_cast<size_t>(rank)]);
      done_ += 1;
    });
  }
  void start_all() {
    for (int r = 0; r < static_cast<int>(options_.size()); ++r) start(r);
  }
  // Waits (real time, bounded) for `count` agents to have returned.
  bool wait_for_ended(int count, std::chrono::seconds limit = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (done_.load() < count && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    return done_.load() >= count;
  }
  void join() {
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
  }
  const Status& result(int rank) const { return results_[static_cast<size_t>(rank)]; }
  // Time on every agent's clock (heartbeats go out, nobody is late).
  void tick(double seconds = 1) {
    for (auto& clock : clocks_) clock->advance(seconds);
  }

 private:
  std::shared_ptr<InprocControlHub> hub_;
  std::vector<std::unique_ptr<comm::Transport>> data_;
  std::vector<std::shared_ptr<FakeClock>> clocks_;
  std::vector<AgentOptions> options_;
  std::vector<Status> results_;
  std::vector<std::thread> threads_;
  std::atomic<int> done_{0};
};

// A client of the master: sends a message and reads the answers.
class TestClient {
 public:
  TestClient(InprocControlHub& hub, const std::string& name) : client_(hub.client(0, name)) {}
  // A full inbox (the queues that hold one message) takes the message on a
  // later try, as a client's socket queues it: never lost, never an error.
  void send(const ctl::Message& m) {
    const std::string bytes = ctl::encode(m);
    ControlChannel::Sent sent = client_.send(bytes);
    for (int tries = 0; sent == ControlChannel::Sent::kFull && tries < 60000; ++tries) {
      std::this_thread::sleep_for(1ms);
      sent = client_.send(bytes);
    }
    REQUIRE(sent == ControlChannel::Sent::kSent);
  }
  // The next answer, within `limit` of real time.
  std::optional<ctl::Message> next(std::chrono::milliseconds limit = 60000ms) {
    std::string bytes;
    if (!client_.receive(limit, &bytes)) return std::nullopt;
    auto m = ctl::decode(bytes);
    REQUIRE_MESSAGE(m.ok(), m.status().to_string());
    return *m;
  }
  // The master's status JSON (answered once the cluster formed).
  nlohmann::json status() {
    send(ctl::StatusRequest{});
    for (;;) {
      auto m = next();
      REQUIRE(m.has_value());
      if (auto* r = std::get_if<ctl::StatusReply>(&*m)) return nlohmann::json::parse(r->status_json);
    }
  }

 private:
  InprocControlHub::Client client_;
};

inline std::string node_state(TestClient& client, int rank) {
  return client.status()["nodes"][static_cast<size_t>(rank)]["state"].get<std::string>();
}

// Waits (real time, bounded) until every node has joined: the master
// answers status requests while the cluster forms too.
inline void wait_formed(TestClient& client, int world) {
  for (int attempt = 0; attempt < 6000; ++attempt) {
    const nlohmann::json status = client.status();
    bool all = true;
    for (int r = 1; r < world; ++r) all = all && status["nodes"][static_cast<size_t>(r)]["state"] == "up";
    if (all) return;
    std::this_thread::sleep_for(10ms);
  }
  FAIL("the cluster did not form");
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs the linear regression sample through the master and returns its
// result JSON (an error fails the test).
inline nlohmann::json run_linear_regression(TestClient& client, const std::vector<std::string>& overrides = {}) {
  ctl::Submit submit;
  submit.job_text = read_text(testing::source_path("samples/linear_regression/linear_regression.json"));
  submit.file_name = "linear_regression.json";
  submit.overrides = overrides;
  client.send(submit);
  for (;;) {
    auto m = client.next();
    REQUIRE_MESSAGE(m.has_value(), "no answer from the master");
    if (auto* r = std::get_if<ctl::SubmitReply>(&*m)) REQUIRE_MESSAGE(r->error.empty(), r->error);
    if (auto* r = std::get_if<ctl::Result>(&*m)) {
      REQUIRE_MESSAGE(r->error.empty(), r->error);
      return nlohmann::json::parse(r->result_json);
    }
  }
}

// The job's Result, while every agent's clock moves 1 s per `turn` of real
// time (at most 3000 turns); none when it never came.
inline std::optional<ctl::Result> await_result(Cluster& cluster, TestClient& client, std::chrono::milliseconds turn) {
  for (int n = 0; n < 3000; ++n) {
    cluster.tick();
    auto m = client.next(turn);
    if (!m) continue;
    if (auto* r = std::get_if<ctl::Result>(&*m)) return *r;
  }
  return std::nullopt;
}

inline void shut_down(Cluster& cluster, TestClient& client, int world) {
  client.send(ctl::Shutdown{});
  REQUIRE(cluster.wait_for_ended(world));
  cluster.join();
}

}  // namespace rill::testing::inproc
