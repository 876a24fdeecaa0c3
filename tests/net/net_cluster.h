// A keyed cluster of real agents on a test bed (tests/net/net_bed.h): agent
// n in node n's namespace at 10.213.0.<n + 1>, every one with the same key
// file, and `rill` commands run as a client in node 0's namespace.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "tests/e2e/process_util.h"
#include "tests/net/net_bed.h"

namespace rill::testing {

class NetCluster {
 public:
  // `agent_args` are added to every agent's command line.
  NetCluster(NetBed& bed, const std::filesystem::path& dir, const std::string& agent_args, int port = 19900)
      : bed_(bed), dir_(dir), port_(port) {
    std::filesystem::create_directories(dir);
    key_ = (dir / "cluster.key").string();
    std::filesystem::remove(key_);
    Ran ran = run_rill("keygen " + key_);
    REQUIRE_MESSAGE(ran.code == 0, ran.output);
    for (int n = 0; n < bed.nodes(); ++n)
      agents_.push_back(std::make_unique<Agent>("--machines " + bed.machines(port) + " --rank " + std::to_string(n) +
                                                    " --key " + key_ + " " + agent_args,
                                                (dir / ("agent" + std::to_string(n) + ".log")).string(),
                                                bed.exec_prefix(n)));
  }

  std::string master() const { return NetBed::address(0) + ":" + std::to_string(port_); }
  // `rill ARGS --master M --key K` as a client in node 0's namespace.
  Ran rill(const std::string& args, int limit_s = 240) const {
    return run_shell(bed_.exec_prefix(0) + " " + binary() + " " + args + " --master " + master() + " --key " + key_,
                     limit_s);
  }
  // Polls `rill status` until every node has joined (at most 200 tries, 60 s).
  void wait_formed() const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int i = 0; i < 200 && std::chrono::steady_clock::now() < deadline; ++i) {
      Ran ran = rill("status", 15);
      if (ran.code == 0 && ran.output.find("not joined") == std::string::npos &&
          ran.output.find("joining") == std::string::npos)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL("the cluster did not form: " << logs());
  }
  Agent& agent(int n) { return *agents_.at(static_cast<size_t>(n)); }
  std::string logs() const {
    std::string out;
    for (size_t n = 0; n < agents_.size(); ++n) out += "\n--- agent " + std::to_string(n) + ":\n" + agents_[n]->output();
    return out;
  }
  // Shuts the cluster down and waits for every agent to exit: the exit codes.
  std::vector<int> shutdown(double seconds = 20) {
    rill("shutdown", 20);
    std::vector<int> codes;
    for (auto& agent : agents_) codes.push_back(agent->wait(seconds));
    return codes;
  }

 private:
  NetBed& bed_;
  std::filesystem::path dir_;
  int port_;
  std::string key_;
  std::vector<std::unique_ptr<Agent>> agents_;
};

}  // namespace rill::testing
