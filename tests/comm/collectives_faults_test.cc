// Fault matrices: a rank that never joins or dies, dropped traffic, lost/repeated/swapped/corrupted messages.
#include <atomic>
#include <limits>
#include <memory>
#include <thread>

#include "comm/collectives.h"
#include "comm/faulty_transport.h"
#include "tests/comm/collectives_test_util.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

TEST_CASE("a rank that never joins: the others fail at the deadline, naming the tag, then refuse") {
  for (Kind kind : kAllKinds) {
    CAPTURE(kind_name(kind));
    const int world = 3;
    auto transports = make_world(kind, world);
    auto statuses = run_ranks(world - 1, [&](int rank) -> Status {
      Collectives c(*transports[rank], CollectiveOptions{4096, std::chrono::milliseconds(300)});
      std::vector<float> data(100, 1.0f);
      Status status = c.all_reduce(data, data, 0x77);
      if (status.code() != Code::kDeadlineExceeded) return internal_error("got {}", status.to_string());
      if (status.message().find("all_reduce tag 0x77") == std::string::npos) {
        return internal_error("message does not name the op and tag: {}", status.message());
      }
      if (status.message().find("from rank") == std::string::npos) {
        return internal_error("message does not name the peer: {}", status.message());
      }
      if (c.all_reduce(data, data, 0x78).code() != Code::kFailedPrecondition) return internal_error("not refused");
      return Status::ok_status();
    });
    check_all_ok(statuses);
  }
}

TEST_CASE("dropped collective traffic is a deadline error naming the silent peer") {
  const int world = 2;
  auto inner = make_inproc_transports(world);
  FaultyTransport rank1(std::move(inner[1]));
  rank1.set_drop([](int, uint64_t, auto, auto) { return true; });
  Transport* transports[2] = {inner[0].get(), &rank1};
  auto statuses = run_ranks(world, [&](int rank) -> Status {
    Collectives c(*transports[rank], CollectiveOptions{4096, std::chrono::milliseconds(300)});
    std::vector<float> data(1000, 1.0f);
    return c.all_reduce(data, data, 5);
  });
  CHECK(statuses[0].code() == Code::kDeadlineExceeded);
  CHECK(statuses[0].message().find("from rank 1") != std::string::npos);
}

// Every message of a collective is numbered within its op and carries the
// checksum of its bytes: rank 1's second message to rank 2 in a ring
// all-reduce (chunks of 4 KiB, so several messages per step) lost,
// repeated, swapped with the next or corrupted is an error naming the link
// on the rank that receives it, never a wrong sum.
TEST_CASE("a lost, repeated, swapped or corrupted collective message is an error naming the link") {
  using Fault = FaultyTransport::Fault;
  for (Fault fault : {Fault::kDrop, Fault::kDuplicate, Fault::kSwap, Fault::kCorrupt}) {
    CAPTURE(static_cast<int>(fault));
    const int world = 3;
    auto inner = make_inproc_transports(world);
    FaultyTransport rank1(std::move(inner[1]));
    auto count = std::make_shared<std::atomic<int>>(0);
    rank1.set_fault(fault, [count](int to, uint64_t, auto, auto) { return to == 2 && ++*count == 2; });
    Transport* transports[3] = {inner[0].get(), &rank1, inner[2].get()};
    auto statuses = run_ranks(world, [&](int rank) -> Status {
      Collectives c(*transports[rank], CollectiveOptions{4096, std::chrono::milliseconds(2000), 0});
      std::vector<float> data(12000, static_cast<float>(rank + 1));
      Status s = c.all_reduce(data, data, 9);
      if (s.ok())
        for (float v : data)
          if (v != 6.0f) return internal_error("a wrong sum: {}", v);
      return s;
    });
    INFO(statuses[2].to_string());
    CHECK(statuses[2].code() == Code::kDataLoss);
    CHECK(statuses[2].message().find("the link from rank 1 to rank 2") != std::string::npos);
    CHECK(statuses[2].message().find(fault == Fault::kCorrupt ? "arrived corrupted" : "was due") != std::string::npos);
    for (const Status& s : statuses) CHECK(s.code() != Code::kInternal);  // never a wrong result
  }
}

namespace {

// After rank 2 died: the collective of `rank` failed, within its 3 s
// deadline (and a scheduling margin), and rank 0, which receives from rank 2
// in the ring, names it.
Status ended_naming_rank_2(int rank, const Status& lost, Clock::duration took) {
  if (lost.ok()) return internal_error("rank {}: the all_reduce succeeded although rank 2 died", rank);
  if (took > std::chrono::milliseconds(4500))
    return internal_error("rank {}: ended after {} ms, past the 3 s deadline", rank,
                          std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
  if (rank == 0 && lost.message().find("rank 2") == std::string::npos)
    return internal_error("rank 0's error should name rank 2, which it receives from: {}", lost.to_string());
  return Status::ok_status();
}

}  // namespace

// A rank that dies in the middle of a collective (after its 20th chunk of
// a 4 MiB ring all_reduce, its transport closes): the others' all_reduce
// ends with an error by the deadline, rank 0's (which receives from rank 2)
// naming rank 2.
TEST_CASE("a rank that dies mid-collective ends it on the others by the deadline, naming it") {
  for (Kind kind : {Kind::kZmq, Kind::kShm}) {
    CAPTURE(kind_name(kind));
    const int world = 3;
    auto transports = make_world(kind, world);
    auto faulty = std::make_unique<FaultyTransport>(std::move(transports[2]));
    FaultyTransport* dying = faulty.get();
    transports[2] = std::move(faulty);
    std::atomic<int> sent_by_2{0};
    std::atomic<bool> dead{false};
    dying->set_drop([&](int, uint64_t, std::span<const std::byte>, std::span<const std::byte>) {
      return sent_by_2.fetch_add(1) >= 20;
    });
    std::thread killer([&] {
      while (sent_by_2.load() < 20) std::this_thread::sleep_for(std::chrono::microseconds(50));
      dying->close();
      dead = true;
    });
    auto statuses = run_ranks(world, [&](int rank) -> Status {
      Collectives c(*transports[rank], CollectiveOptions{4096, std::chrono::milliseconds(3000)});
      std::vector<float> x(size_t{1} << 20, 1.0f), y(size_t{1} << 20);
      const auto start = Clock::now();
      Status lost = c.all_reduce(x, y, 1);
      const auto took = Clock::now() - start;
      if (rank == 2) return lost.ok() ? internal_error("rank 2 finished although its transport closed") : Status::ok_status();
      return ended_naming_rank_2(rank, lost, took);
    });
    killer.join();
    CHECK(dead.load());
    check_all_ok(statuses);
  }
}

// A rank whose process goes away between collectives (its transport closes
// once the others have what it sent): the next collective ends on the others
// by the deadline; the rank that receives from it directly is told at once,
// naming it.
TEST_CASE("a rank that dies between collectives ends the next one on the others by the deadline, naming it") {
  for (Kind kind : {Kind::kZmq, Kind::kShm}) {
    CAPTURE(kind_name(kind));
    const int world = 3;
    auto transports = make_world(kind, world);
    std::atomic<int> finished_first{0};
    auto statuses = run_ranks(world, [&](int rank) -> Status {
      Collectives c(*transports[rank], CollectiveOptions{4096, std::chrono::milliseconds(3000)});
      std::vector<float> x(100000, 1.0f), y(100000);  // the ring: rank 0 receives from rank 2
      RILL_RETURN_IF_ERROR(c.all_reduce(x, y, 1));
      RILL_RETURN_IF_ERROR(expect_equal(y, std::vector<float>(100000, 3.0f), "before"));
      if (rank == 2) {
        while (finished_first.load() < 2) std::this_thread::yield();
        transports[2]->close();
        return Status::ok_status();
      }
      ++finished_first;
      const auto start = Clock::now();
      Status lost = c.all_reduce(x, y, 2);
      const auto took = Clock::now() - start;
      return ended_naming_rank_2(rank, lost, took);
    });
    check_all_ok(statuses);
  }
}

// A rank busy elsewhere past the deadline (a node waiting for its checkpoint
// disk) while the options' liveness grows: the others wait on and the sum is
// whole. With liveness that stands still the same wait is the deadline's
// error, so only word of work going on extends it.
TEST_CASE("a collective waits past its deadline while liveness grows, and not otherwise") {
  for (bool growing : {true, false}) {
    CAPTURE(growing);
    const int world = 2;
    auto transports = make_inproc_transports(world);
    std::atomic<int64_t> written{0};
    std::atomic<bool> done{false};
    std::thread writer([&] {  // a disk writing 10 chunks a second, until the ranks end (5 s at most)
      for (int i = 0; i < 50 && growing && !done.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        written.fetch_add(256 << 10);
      }
    });
    auto statuses = run_ranks(world, [&](int rank) -> Status {
      CollectiveOptions options{4096, std::chrono::milliseconds(300)};
      options.liveness = [&] { return static_cast<uint64_t>(written.load()); };
      Collectives c(*transports[rank], options);
      if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // 3.3 deadlines late
      std::vector<float> data(1000, static_cast<float>(rank + 1));
      RILL_RETURN_IF_ERROR(c.all_reduce(data, data, 9));
      for (float v : data)
        if (v != 3.0f) return internal_error("got {}, want 3", v);
      return Status::ok_status();
    });
    done = true;
    writer.join();
    if (growing) {
      check_all_ok(statuses);
    } else {
      CHECK(statuses[0].code() == Code::kDeadlineExceeded);
      CHECK(statuses[0].message().find("from rank 1") != std::string::npos);
    }
  }
}

// A count another node claims may be anything (a heartbeat's checkpoint
// bytes): sums of such counts wrap around in uint64, and a wrapped sum is
// still a move, never undefined arithmetic or a count taken as standing still.
TEST_CASE("a liveness count that wraps around still moves") {
  uint64_t claimed = std::numeric_limits<uint64_t>::max() - 1;
  const comm::Liveness liveness = [&] { return claimed + uint64_t{3}; };  // wraps to 1
  comm::LivenessWatch watch(liveness);
  CHECK_FALSE(watch.moved());
  claimed = std::numeric_limits<uint64_t>::max();  // the sum wraps to 2
  CHECK(watch.moved());
  CHECK_FALSE(watch.moved());
  const comm::Liveness none;
  comm::LivenessWatch nothing(none);
  CHECK_FALSE(nothing.moved());
}
