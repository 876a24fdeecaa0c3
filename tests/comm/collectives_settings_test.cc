// Collectives over a group of ranks, concurrently under distinct tags, asynchronously, after a rendezvous.
#include <algorithm>
#include <atomic>
#include <thread>

#include "comm/async_collectives.h"
#include "comm/collectives.h"
#include "comm/group_transport.h"
#include "comm/rendezvous.h"
#include "tests/comm/collectives_test_util.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

// Collectives among some ranks (a placement's nodes): two groups of a world
// of 4 run at once with the same tag, each summing its own members only.
TEST_CASE("collectives over a group of ranks: group ranks map to the members, groups with one tag do not mix") {
  const int world = 4;
  auto transports = make_inproc_transports(world);
  const std::vector<std::vector<int>> groups = {{0, 2}, {1, 3}};
  auto statuses = run_ranks(world, [&](int rank) -> Status {
    const std::vector<int>& members = groups[static_cast<size_t>(rank % 2)];
    GroupTransport group(*transports[rank], members);
    if (!group.member() || group.world() != 2 || group.rank() != rank / 2)
      return internal_error("rank {}: group rank {} of {}", rank, group.rank(), group.world());
    if (group.send(2, 1, {}).ok()) return internal_error("a send outside the group went through");
    Collectives collectives(group);
    const size_t count = 1001;
    std::vector<float> out(count);
    RILL_RETURN_IF_ERROR(collectives.all_reduce(input(rank, count, 5), out, 7));
    std::vector<float> want(count, 0.0f);
    for (int m : members)
      for (size_t i = 0; i < count; ++i) want[i] += value(m, i, 5);
    RILL_RETURN_IF_ERROR(expect_equal(out, want, "group all_reduce"));
    return collectives.barrier(8);
  });
  check_all_ok(statuses);
  GroupTransport outsider(*transports[1], {0, 2});
  CHECK_FALSE(outsider.member());
}

TEST_CASE("concurrent collectives with distinct tags do not mix") {
  for (Kind kind : kAllKinds) {
    CAPTURE(kind_name(kind));
    const int world = 3;
    auto transports = make_world(kind, world);
    auto statuses = run_ranks(world, [&](int rank) -> Status {
      Status other;
      std::thread second([&] {
        Collectives c(*transports[rank], CollectiveOptions{512, std::chrono::milliseconds(20000), 0});
        auto in = input(rank, 3001, 9);
        std::vector<float> out(3001);
        for (int i = 0; i < 10 && other.ok(); ++i) {
          other = c.all_reduce(in, out, 200);
          if (other.ok()) other = expect_equal(out, sum(world, 3001, 9), "tag 200");
        }
      });
      Collectives c(*transports[rank], CollectiveOptions{512, std::chrono::milliseconds(20000)});
      auto in = input(rank, 2999, 4);
      std::vector<float> out(2999);
      Status mine;
      for (int i = 0; i < 10 && mine.ok(); ++i) {
        mine = c.all_reduce(in, out, 100);
        if (mine.ok()) mine = expect_equal(out, sum(world, 2999, 4), "tag 100");
      }
      second.join();
      RILL_RETURN_IF_ERROR(mine);
      return other;
    });
    check_all_ok(statuses);
  }
}

// Asynchronous collectives: the handle is not done while a peer has not
// joined (rank 1 joins only after rank 0 saw that), the caller works
// meanwhile, and handles complete in the order queued with the blocking
// calls' results; a peer that never joins ends the handle at the deadline.
TEST_CASE("async collectives return handles at once; wait and test see them end, in order, with errors") {
  const int world = 2;
  auto transports = make_inproc_transports(world);
  std::atomic<bool> seen_pending{false};
  auto statuses = run_ranks(world, [&](int rank) -> Status {
    const size_t count = 1031;
    auto in = input(rank, count, 1);
    std::vector<float> summed(count), largest(count);
    std::vector<float> gathered(count * world);
    if (rank == 0) {
      AsyncCollectives c(*transports[rank], CollectiveOptions{4096, std::chrono::milliseconds(20000)});
      auto sum_work = c.all_reduce(in, summed, 1);
      auto max_work = c.all_reduce(in, largest, 2, ReduceOp::kMax);
      auto gather_work = c.all_gather(bytes(in), writable(gathered), 3);
      if (sum_work->test() || max_work->test())
        return internal_error("rank 0: an all_reduce ended before rank 1 joined");
      seen_pending = true;
      RILL_RETURN_IF_ERROR(gather_work->wait());  // the last queued: the others ended before it
      if (!sum_work->test() || !max_work->test()) return internal_error("rank 0: handles ended out of order");
      RILL_RETURN_IF_ERROR(sum_work->wait());
      RILL_RETURN_IF_ERROR(max_work->wait());
    } else {
      while (!seen_pending) std::this_thread::yield();
      Collectives c(*transports[rank], CollectiveOptions{4096, std::chrono::milliseconds(20000)});
      RILL_RETURN_IF_ERROR(c.all_reduce(in, summed, 1));
      RILL_RETURN_IF_ERROR(c.all_reduce(in, largest, 2, ReduceOp::kMax));
      RILL_RETURN_IF_ERROR(c.all_gather(bytes(in), writable(gathered), 3));
    }
    RILL_RETURN_IF_ERROR(expect_equal(summed, sum(world, count, 1), fmt::format("sum on rank {}", rank)));
    std::vector<float> want_max(count);
    for (size_t i = 0; i < count; ++i) want_max[i] = std::max(value(0, i, 1), value(1, i, 1));
    RILL_RETURN_IF_ERROR(expect_equal(largest, want_max, fmt::format("max on rank {}", rank)));
    std::vector<float> want_gathered = input(0, count, 1), second = input(1, count, 1);
    want_gathered.insert(want_gathered.end(), second.begin(), second.end());
    return expect_equal(gathered, want_gathered, fmt::format("all_gather on rank {}", rank));
  });
  check_all_ok(statuses);

  // Rank 1 never joins: rank 0's handle ends with the deadline error naming
  // the tag, and the object refuses what was queued after it.
  auto lonely = make_inproc_transports(world);
  AsyncCollectives c(*lonely[0], CollectiveOptions{4096, std::chrono::milliseconds(200)});
  std::vector<float> x(16, 1.0f), y(16);
  auto first = c.all_reduce(x, y, 7);
  auto second = c.barrier(8);
  Status failed = first->wait();
  CHECK_FALSE(failed.ok());
  CHECK(failed.to_string().find("all_reduce") != std::string::npos);
  Status refused = second->wait();
  CHECK(refused.code() == Code::kFailedPrecondition);
  CHECK(refused.to_string().find("an earlier collective on this object failed") != std::string::npos);
}

// The rendezvous: ranks that know only the master's port find each other's
// data endpoints (rank r's port is the master's + 1 + r) and all-reduce.
TEST_CASE("connect_world: 3 ranks meet at the master's port and all-reduce; a wrong world or a missing rank is named") {
  // Fixed ports below the kernel's ephemeral range (a data port that an
  // outgoing connection of this process may take as its own source port
  // can end up connected to itself): 19510-19513, 19520, 19530.
  const Endpoint master{"127.0.0.1", 19510};
  const int world = 3;
  std::vector<Communicator> kept(world);  // closed once every rank is done
  auto statuses = run_ranks(world, [&](int rank) -> Status {
    RILL_ASSIGN_OR_RETURN(kept[rank], connect_world(rank, world, master, std::chrono::seconds(20)));
    Communicator& c = kept[rank];
    if (c.collectives->rank() != rank || c.collectives->world() != world)
      return internal_error("rank {} of {}: the communicator says {} of {}", rank, world, c.collectives->rank(),
                            c.collectives->world());
    std::vector<float> x(5, static_cast<float>(rank + 1)), y(5);
    RILL_RETURN_IF_ERROR(c.collectives->all_reduce(x, y, 1));
    return expect_equal(y, std::vector<float>(5, 6.0f), fmt::format("all_reduce on rank {}", rank));
  });
  check_all_ok(statuses);

  // Rank 2 expects 4 ranks: rank 0 refuses, naming it, and so does every
  // rank it answers.
  const Endpoint master2{"127.0.0.1", 19520};
  auto wrong = run_ranks(world, [&](int rank) -> Status {
    return rendezvous(rank, rank == 2 ? 4 : world, master2, 0, Clock::now() + std::chrono::seconds(5)).status();
  });
  CHECK(wrong[0].to_string().find("rank 2 expects 4 ranks, rank 0 3") != std::string::npos);
  CHECK(wrong[2].to_string().find("rank 2 expects 4 ranks, rank 0 3") != std::string::npos);

  // Rank 2 never comes: rank 0 says so at its deadline, and so does rank 1
  // (waiting a little longer, to hear it).
  const Endpoint master3{"127.0.0.1", 19530};
  auto missing = run_ranks(2, [&](int rank) -> Status {
    return rendezvous(rank, world, master3, 0, Clock::now() + std::chrono::milliseconds(rank == 0 ? 500 : 3000))
        .status();
  });
  CHECK(missing[0].to_string().find("rank(s) 2 of 3 did not join by the deadline") != std::string::npos);
  CHECK(missing[1].to_string().find("rank(s) 2 of 3 did not join") != std::string::npos);
}
