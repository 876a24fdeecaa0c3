// `rill run --nodes`: its agents on one address, exchanging data through
// shared memory as one machine's ranks do, or with --apart an address each,
// as machines; and what a /dev/shm too small for their inboxes leaves them.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "process_util.h"
#include "run_results.h"

namespace {

using rill::testing::binary;
using rill::testing::Ran;
using rill::testing::read_json;
using rill::testing::read_text;
using rill::testing::root;
using rill::testing::run_rill;
using rill::testing::run_shell;
using rill::testing::ten_step_curve;

std::filesystem::path temp_dir() { return rill::testing::temp_dir("rill-local-nodes-"); }

}  // namespace

// rill run --nodes puts its agents on one address (node r on --ctrl-port +
// 2r), so their ranks exchange data through shared memory as one machine's
// do; --apart gives each an address of its own, talking TCP as machines do.
// The transport moves the same bytes either way: the same curve, bit for bit.
TEST_CASE("rill run --nodes shares one address through shared memory; --apart stands in for machines") {
  const std::string mlp = root() + "/samples/mlp/mlp.json --nodes 2 --devices cpu:1";
  const auto one_address = temp_dir() / "one-address", apart = temp_dir() / "apart";
  auto shared = ten_step_curve(mlp + " --ctrl-port 19130 --logdir " + one_address.string(), temp_dir() / "shm.json");
  auto tcp = ten_step_curve(mlp + " --ctrl-port 19130 --apart --logdir " + apart.string(), temp_dir() / "tcp.json");
  CHECK(shared == tcp);
  const std::string said = "rank(s) 0 share this address: messages to them go through shared memory";
  const std::string node1 = read_text((one_address / "node-1.log").string());
  INFO(node1);
  CHECK(node1.find("node 1 (127.0.0.1:19132)") != std::string::npos);
  CHECK(node1.find(said) != std::string::npos);
  const std::string node1_apart = read_text((apart / "node-1.log").string());
  CHECK(node1_apart.find("node 1 (127.0.0.2:19130)") != std::string::npos);
  CHECK(node1_apart.find(said) == std::string::npos);
  // Ports past the last an agent may take are refused before any starts.
  Ran high = run_rill("run " + root() + "/samples/mlp/mlp.json --nodes 3 --ctrl-port 65532");
  CHECK(high.code != 0);
  CHECK(high.output.find("--ctrl-port 65532 leaves no room for 3 agents on one address") != std::string::npos);
}

// Three agents on one address, in a mount namespace whose /dev/shm (8 MiB)
// cannot hold any one's inbox (2 rings of 4 MiB and their headers): each
// says it has no shared memory and talks TCP, and the job runs as it would
// apart. Before the inbox's pages were reserved, the first write into it
// killed the agent (SIGBUS). Needs a mount namespace (root, and namespaces
// allowed), else it says so and checks nothing.
TEST_CASE("rill run --nodes on a /dev/shm too small for the agents' inboxes talks TCP instead") {
  if (geteuid() != 0) {
    MESSAGE("skipped: a mount namespace of its own needs root");
    return;
  }
  // Root in a container may still be refused namespaces or mounts.
  if (Ran probe = run_shell("unshare -m sh -c \"mount -t tmpfs -o size=1m tmpfs /dev/shm\""); probe.code != 0) {
    const std::string why = "skipped: no mount namespace with a /dev/shm of its own here: " + probe.output;
    MESSAGE(why);
    return;
  }
  const auto logs = temp_dir() / "small-shm";
  std::filesystem::remove_all(logs);
  const std::string mlp = root() + "/samples/mlp/mlp.json --nodes 3 --devices cpu:1";
  Ran ran = run_shell("unshare -m sh -c \"mount -t tmpfs -o size=8m tmpfs /dev/shm && exec " + binary() + " run " +
                      mlp + " --ctrl-port 19180 --steps 10 --logdir " + logs.string() + " --result " +
                      (temp_dir() / "small-shm.json").string() + "\"");
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  const std::string node1 = read_text((logs / "node-1.log").string());
  INFO(node1);
  CHECK(node1.find("no shared memory") != std::string::npos);
  CHECK(node1.find("is /dev/shm full?") != std::string::npos);
  const auto apart = ten_step_curve(mlp + " --apart --ctrl-port 19180", temp_dir() / "small-shm-apart.json");
  CHECK(read_json(temp_dir() / "small-shm.json")["loss_curve"] == apart);
}
