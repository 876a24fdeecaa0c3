// The master's word on where a joining agent listens (Join.address, `rill
// agent --address`): agents of one process (tests/runtime/inproc_cluster.h)
// whose node 2 says it listens away from its entry of the machine list.
// Before the data plane is asked, the master refuses an address no other
// node could reach it at, or another node's, naming it to the node.
#include <doctest/doctest.h>

#include <string>

#include "tests/runtime/inproc_cluster.h"

using namespace rill;
using namespace rill::testing::inproc;

namespace {

// Why the master refused node 2 of a 3-node cluster, listening at `at`
// (the others then wait out the join deadline).
std::string refusal(const Machine& at) {
  Cluster cluster(3);
  cluster.options(2).at = at;
  cluster.options(2).insecure = true;  // beyond loopback (nothing listens: its planes are in-process)
  cluster.start_all();
  REQUIRE(cluster.wait_for_ended(1));
  cluster.tick(31);
  REQUIRE(cluster.wait_for_ended(3));
  cluster.join();
  CHECK_FALSE(cluster.result(0).ok());
  return cluster.result(2).message();
}

}  // namespace

TEST_CASE("the master refuses a standby's address no node could reach, or another node's, naming it") {
  // Node 1 listens at 127.0.0.1:19910 (its data port 19911).
  const struct {
    Machine at;
    std::string named;
  } cases[] = {
      {{"0.0.0.0", 19920}, "node 2 (127.0.0.1:19920) says it listens at 0.0.0.0:19920: 0.0.0.0 is no one machine's"},
      {{"ff02::1", 19920}, "ff02::1 is no one machine's address"},
      {{"node9", 19920}, "'node9' is not an IPv4 or IPv6 address"},
      {{"127.0.0.1", 19910}, "says it listens at 127.0.0.1:19910, where node 1 (127.0.0.1:19910) does"},
      // Past the master's checks: this in-process data plane has no
      // addresses to move a rank to.
      {{"10.0.0.9", 19920}, "node 2 (127.0.0.1:19920) cannot be reached at 10.0.0.9:19920: "},
  };
  for (const auto& c : cases) {
    CAPTURE(c.at.address);
    const std::string error = refusal(c.at);
    CHECK_MESSAGE(error.find(c.named) != std::string::npos, error);
  }
}
