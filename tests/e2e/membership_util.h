// What the membership suites share: a job's progress lines, a folder of
// each case's own, and the options of a checkpointed run.
#pragma once

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "checkpoint_values.h"
#include "process_util.h"
#include "runtime/cluster/client.h"

namespace rill::testing::membership {

using Clock = std::chrono::steady_clock;
using rill::testing::Agent;
using rill::testing::read_text;
inline std::string model_bytes(const std::filesystem::path& checkpoint_dir, int64_t step) {
  return rill::testing::checkpoint_values(checkpoint_dir, step);
}

// Progress lines of a submitted job, and a wait for one of them.
struct Lines {
  std::mutex mu;
  std::vector<std::string> lines;
  void add(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  }
  bool has(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu);
    for (const std::string& l : lines)
      if (l.find(text) != std::string::npos) return true;
    return false;
  }
  bool wait_for(const std::string& text, double seconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < deadline && !has(text)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return has(text);
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mu);
    std::string out;
    for (const std::string& l : lines) out += l + "\n";
    return out;
  }
};

// Polls `done` every 20 ms for at most `seconds`.
inline bool until(const std::function<bool()>& done, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

// A folder of this test's own, empty.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = rill::testing::temp_dir("rill-membership-") / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The agents of one case's cluster: node r on 127.0.0.(r + 1):`port`,
// logging to dir/<prefix><r>.log (an agent started again to
// <prefix><r>-again.log), and a client of node 0 (null when it could not
// connect: the case REQUIREs it).
struct Cluster {
  Cluster(const std::filesystem::path& dir, std::string prefix, int nodes, int port, std::string extra = "")
      : dir(dir), prefix(std::move(prefix)), port(port) {
    std::string machines;
    for (int r = 0; r < nodes; ++r) machines += fmt::format("{}127.0.0.{}:{}", r ? "," : "", r + 1, port);
    args = "--machines " + machines + " --join-timeout 30 " + extra + (extra.empty() ? "" : " ") + "--rank ";
    for (int r = 0; r < nodes; ++r) agents.push_back(std::make_unique<Agent>(args + std::to_string(r), log_of(r, "")));
    auto connected = rill::Client::connect(fmt::format("127.0.0.1:{}", port), 30);
    if (connected.ok()) client = std::move(*connected);
  }
  std::string log_of(int r, const std::string& suffix) const {
    return (dir / fmt::format("{}{}{}.log", prefix, r, suffix)).string();
  }
  // The first agent of node r's log.
  std::string log(int r) const { return read_text(log_of(r, "")); }
  Agent& operator[](int r) { return *agents[static_cast<size_t>(r)]; }
  // A new agent of node r, as a supervisor would start it.
  void restart(int r) { agents[static_cast<size_t>(r)] = std::make_unique<Agent>(args + std::to_string(r), log_of(r, "-again")); }
  // The client's shutdown, and node 0's end.
  int shut_down() {
    if (client) (void)client->shutdown();
    return agents[0]->wait(15);
  }

  std::filesystem::path dir;
  std::string prefix;
  int port;
  std::string args;
  std::vector<std::unique_ptr<Agent>> agents;
  std::unique_ptr<rill::Client> client;
};

// A job submitted to `cluster` while a thread kills node `victim`'s agent
// (SIGKILL) once a progress line says `step` steps are done: the reply, its
// progress lines, and whether the kill came (a case REQUIREs it).
struct KilledRun {
  StatusOr<rill::SubmitResult> ran = Status(Code::kAborted, "not submitted");
  Lines lines;
  bool killed = false;
};
// Kills node `victim` once step `step` is printed and `ready` (polled, for
// at most 60 s) holds.
inline std::unique_ptr<KilledRun> submit_killing(Cluster& cluster, const std::string& job,
                                                 const std::string& file_name, rill::SubmitOptions options,
                                                 int victim, int64_t step,
                                                 const std::function<bool()>& ready = nullptr) {
  auto run = std::make_unique<KilledRun>();
  options.on_line = [lines = &run->lines](const std::string& line) { lines->add(line); };
  std::thread killer([&] {
    if (!run->lines.wait_for(fmt::format("step {:>6}/", step), 120)) return;
    for (int i = 0; ready && !ready(); ++i) {
      if (i == 6000) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(cluster[victim].pid, SIGKILL);
    run->killed = true;
  });
  run->ran = cluster.client->submit_text(job, file_name, options);
  killer.join();
  return run;
}

// `steps` steps of a job, a progress line each, checkpointed at its end only.
inline rill::SubmitOptions options_for(const std::filesystem::path& checkpoints, int64_t steps) {
  rill::SubmitOptions options;
  options.steps = steps;
  options.overrides = {"checkpoint.dir=" + checkpoints.string(), "checkpoint.every=1000", "train.log_every=1"};
  return options;
}

}  // namespace rill::testing::membership
