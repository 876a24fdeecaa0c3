// What the membership suites share: a job's progress lines, a folder of
// each case's own, and the options of a checkpointed run.
#pragma once

#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint_values.h"
#include "comm/default_key.h"
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
    // The first agent of a fresh build folder makes the user's default key:
    // a client that reads none first connects without one, and is refused.
    if (const char* named = std::getenv("RILL_KEY_FILE"); named == nullptr || *named == '\0')
      until([] {
        auto key = rill::comm::default_key_path();
        return key.ok() && std::filesystem::exists(key.value());
      }, 30);
    auto connected = rill::Client::connect(fmt::format("127.0.0.1:{}", port), 30);
    if (connected.ok()) client = std::move(*connected);
  }
  std::string log_of(int r, const std::string& suffix) const {
    return (dir / fmt::format("{}{}{}.log", prefix, r, suffix)).string();
  }
  // The first agent of node r's log.
  std::string log(int r) const { return read_text(log_of(r, "")); }
  Agent& operator[](int r) { return *agents[static_cast<size_t>(r)]; }
  // A new agent of node r, as a supervisor would start it; at `address`
  // (`rill agent --address`) where given, a standby taking its place, with
  // `extra` flags.
  void restart(int r, const std::string& address = "", const std::string& extra = "") {
    agents[static_cast<size_t>(r)] = std::make_unique<Agent>(
        args + std::to_string(r) + (address.empty() ? "" : " --address " + address) + " " + extra,
        log_of(r, "-again"));
  }
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
// (SIGKILL) once a progress line says `step` steps are done and `ready`
// (polled, for at most 60 s) holds, and node `with`'s too where given (in
// the same attempt: `with` is stopped first, so it cannot be heard of
// alone); with `back_at`, the thread starts the victim's agent again once
// the job goes on without it and `back_at` steps are done, or with
// `back_once` once a progress line says that; at `back_address` where given
// (a standby agent at another address).
// The reply, its progress lines, and whether the kill and the restart came
// (a case REQUIREs them).
struct KilledRun {
  StatusOr<rill::SubmitResult> ran = Status(Code::kAborted, "not submitted");
  Lines lines;
  bool killed = false;
  bool back = false;
};
struct Kill {
  int victim;
  int64_t step;
  std::function<bool()> ready = nullptr;
  int64_t back_at = -1;
  int with = -1;
  std::string back_once;
  std::string back_address;
};
inline std::unique_ptr<KilledRun> submit_killing(Cluster& cluster, const std::string& job,
                                                 const std::string& file_name, rill::SubmitOptions options,
                                                 const Kill& loss) {
  auto run = std::make_unique<KilledRun>();
  options.on_line = [lines = &run->lines](const std::string& line) { lines->add(line); };
  std::thread killer([&] {
    Lines& lines = run->lines;
    if (!lines.wait_for(fmt::format("step {:>6}/", loss.step), 120)) return;
    for (int i = 0; loss.ready && !loss.ready(); ++i) {
      if (i == 6000) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (loss.with >= 0) ::kill(cluster[loss.with].pid, SIGSTOP);
    ::kill(cluster[loss.victim].pid, SIGKILL);
    if (loss.with >= 0) ::kill(cluster[loss.with].pid, SIGKILL);
    run->killed = true;
    if (loss.back_at < 0 && loss.back_once.empty()) return;
    cluster[loss.victim].wait(10);
    if (!loss.back_once.empty()) {
      if (!lines.wait_for(loss.back_once, 60)) return;
    } else if (!lines.wait_for("going on from step", 60) ||
               !lines.wait_for(fmt::format("step {:>6}/", loss.back_at), 60)) {
      // Back once the others have run some steps without it (sooner, it
      // would join before their first: a stretch of no steps).
      return;
    }
    cluster.restart(loss.victim, loss.back_address);
    run->back = true;
  });
  run->ran = cluster.client->submit_text(job, file_name, options);
  killer.join();
  return run;
}
inline std::unique_ptr<KilledRun> submit_killing(Cluster& cluster, const std::string& job,
                                                 const std::string& file_name, rill::SubmitOptions options,
                                                 int victim, int64_t step) {
  return submit_killing(cluster, job, file_name, std::move(options), Kill{victim, step});
}

// One stretch of a reference run through checkpoints: `options` (up to
// their steps) on `cluster`, from the newest checkpoint in their
// checkpoint.dir unless `from` says the start. It must end well; its
// result's JSON.
enum class From { kStart, kLatest };
inline std::string run_stretch(Cluster& cluster, const std::string& job, const std::string& file_name,
                               rill::SubmitOptions options, From from) {
  if (from == From::kLatest) options.resume = "latest";
  auto ran = cluster.client->submit_text(job, file_name, options);
  REQUIRE(ran.ok());
  INFO(ran->result_json);
  REQUIRE(ran->status.ok());
  return ran->result_json;
}

// `steps` steps of a job, a progress line each, checkpointed at its end only.
inline rill::SubmitOptions options_for(const std::filesystem::path& checkpoints, int64_t steps) {
  rill::SubmitOptions options;
  options.steps = steps;
  options.overrides = {"checkpoint.dir=" + checkpoints.string(), "checkpoint.every=1000", "train.log_every=1"};
  return options;
}

// samples/mlp/mlp_pipeline.json, its stages placed on named nodes, on 2
// agents at `port`: node 1 is killed at step 12 and its agent started again
// once node 0 waits for every node, at `back_address` where given (a
// standby). The job restarts from node 0's memory at a replica step (every
// 5), and its model is bit for bit a 2-node run (at `reference_port`)
// resumed from a checkpoint of that step: the values node 0 gathered are
// the f32 bits the 2 nodes held after it, which that run writes to its
// checkpoint, and from there both are the same 2-node plan from the same
// values (same kernels, same batches); where a rank listens changes none
// of that.
inline void pipeline_back_from_memory(const std::string& name, int port, int reference_port,
                                      const std::string& back_address) {
  const auto dir = fresh_dir(name);
  Cluster cluster(dir, "q", 2, port);
  REQUIRE(cluster.client);
  const std::string job = read_text(rill::testing::root() + "/samples/mlp/mlp_pipeline.json");
  constexpr int64_t kSteps = 40;
  rill::SubmitOptions options = options_for(dir / "live", kSteps);
  options.min_nodes = 1;
  options.replica_every = 5;
  options.max_restarts = 1;
  const auto killed = submit_killing(
      cluster, job, "mlp_pipeline.json", options,
      Kill{.victim = 1, .step = 12, .back_once = "once every node is up", .back_address = back_address});
  auto& run = killed->ran;
  Lines& lines = killed->lines;
  REQUIRE(run.ok());
  INFO(lines.all());
  INFO(run->result_json);
  INFO(read_text(cluster.log_of(1, "-again")));
  REQUIRE(killed->killed);
  REQUIRE(killed->back);
  REQUIRE(run->status.ok());
  auto result = nlohmann::json::parse(run->result_json);
  REQUIRE(result["restarts"].size() == 2);
  CHECK(result["restarts"][0]["from"] == "memory");  // the attempt on 1 node, which cannot compile
  const auto& r = result["restarts"][1];
  CHECK(r["from"] == "memory");
  CHECK(r["nodes"] == 2);
  const int64_t at = r["resumed_from_step"].get<int64_t>();
  CHECK((at == 10 || at == 5));  // replicas every 5 steps, the newest both held at the loss
  CHECK(lines.has("the job cannot run on the 1 node(s) that remain"));
  CHECK(lines.has(fmt::format("restarting from step {} in node 0's memory", at)));
  CHECK(result["steps"] == kSteps);
  CHECK(cluster.log(0).find(fmt::format("node 0 gathered the model after step {}", at)) != std::string::npos);
  if (!back_address.empty())  // named as listed, reached where it is
    CHECK(cluster.log(0).find(fmt::format("node 1 (127.0.0.2:{}) listens at {}:{} now", port, back_address, port)) !=
          std::string::npos);

  Cluster pair(dir, "s", 2, reference_port);
  REQUIRE(pair.client);
  run_stretch(pair, job, "mlp_pipeline.json", options_for(dir / "reference", at), From::kStart);
  const std::string last = run_stretch(pair, job, "mlp_pipeline.json", options_for(dir / "reference", kSteps),
                                       From::kLatest);
  CHECK(!model_bytes(dir / "live", kSteps).empty());
  CHECK(model_bytes(dir / "live", kSteps) == model_bytes(dir / "reference", kSteps));
  CHECK(result["final_loss"] == nlohmann::json::parse(last)["final_loss"]);
  CHECK(cluster.shut_down() == 0);
  CHECK(pair.shut_down() == 0);
}

}  // namespace rill::testing::membership
