// Shared-memory rings (comm/shm_ring.h) and the ZeroMQ transport's lanes to
// the ranks of its machine (comm/shm_lanes.h).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "comm/shm_lanes.h"
#include "comm/shm_ring.h"
#include "tests/comm/comm_test_util.h"

namespace rill::comm {
namespace {

using testing::as_span;
using testing::free_ports;
using testing::in_ms;
using testing::loopback_endpoints;

std::string test_name(const char* what) { return fmt::format("/rill-test-{}-{}", what, getpid()); }

std::vector<std::byte> pattern(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + static_cast<size_t>(seed) * 7) & 0xff);
  return v;
}

}  // namespace

TEST_CASE("a ring hands over records of any size in order across many wraps, and refuses what does not fit") {
  auto inbox = ShmInbox::create(test_name("ring"), 1, 64 << 10);
  REQUIRE_MESSAGE(inbox.ok(), inbox.status().to_string());
  auto producer = ShmInbox::open(test_name("ring"), 1);
  REQUIRE_MESSAGE(producer.ok(), producer.status().to_string());
  ShmRing in = (*inbox)->ring(0), out = (*producer)->ring(0);
  CHECK(out.max_record_bytes() == (64 << 10) / 4 - sizeof(RecordHeader));
  std::mt19937 random(7);
  int written = 0, read = 0;
  for (int round = 0; round < 2000; ++round) {
    // Write until full, then read some: positions wrap around the ring.
    while (true) {
      const size_t n = random() % out.max_record_bytes();
      auto bytes = pattern(n, written);
      RecordHeader h;
      h.tag = static_cast<uint64_t>(written);
      const size_t split = n / 3;
      const ShmRing::Write wrote = out.try_write(h, std::span(bytes).first(split), std::span(bytes).subspan(split));
      REQUIRE(wrote != ShmRing::Write::kCorrupt);
      if (wrote == ShmRing::Write::kFull) break;
      ++written;
    }
    const int take = static_cast<int>(random() % 5) + 1;
    for (int k = 0; k < take && read < written; ++k) {
      RecordHeader h;
      std::span<const std::byte> bytes;
      REQUIRE(in.peek(&h, &bytes) == ShmRing::Peek::kRecord);
      REQUIRE(h.tag == static_cast<uint64_t>(read));
      auto want = pattern(bytes.size(), read);
      REQUIRE(std::memcmp(bytes.data(), want.data(), bytes.size()) == 0);
      in.pop();
      ++read;
    }
  }
  CHECK(written > 2000);
  while (read < written) {
    RecordHeader h;
    std::span<const std::byte> bytes;
    REQUIRE(in.peek(&h, &bytes) == ShmRing::Peek::kRecord);
    CHECK(h.tag == static_cast<uint64_t>(read++));
    in.pop();
  }
  CHECK(in.empty());
}

TEST_CASE("a ring whose producer wrote garbage is reported corrupt, not read out of bounds") {
  const std::string name = test_name("corrupt");
  auto inbox = ShmInbox::create(name, 1, 64 << 10);
  REQUIRE(inbox.ok());
  auto producer = ShmInbox::open(name, 1);
  REQUIRE(producer.ok());
  ShmRing in = (*inbox)->ring(0), out = (*producer)->ring(0);
  REQUIRE(out.try_write(RecordHeader{}, as_span("hello"), {}) == ShmRing::Write::kWritten);
  // Another mapping, as a faulty process would have: the first record lies
  // after the 256-byte inbox header and the ring's 256-byte positions.
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  REQUIRE(fd >= 0);
  void* raw = mmap(nullptr, 512 + (64 << 10), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(raw != MAP_FAILED);
  auto* record = reinterpret_cast<RecordHeader*>(static_cast<std::byte*>(raw) + 512);
  REQUIRE(record->bytes == 5);  // the layout assumed above
  record->bytes = 0x7fffffff;
  RecordHeader h;
  std::span<const std::byte> bytes;
  CHECK(in.peek(&h, &bytes) == ShmRing::Peek::kCorrupt);
  munmap(raw, 512 + (64 << 10));
}

TEST_CASE("shared-memory inboxes: a missing one is not found yet, a bad size is refused, a taken name is not taken over") {
  CHECK(ShmInbox::open(test_name("absent"), 1).status().code() == Code::kNotFound);
  CHECK(ShmInbox::create(test_name("bad"), 1, 100000).status().code() == Code::kInvalidArgument);  // not a power of two
  CHECK(ShmInbox::create(test_name("bad"), 0, 64 << 10).status().code() == Code::kInvalidArgument);
  auto first = ShmInbox::create(test_name("taken"), 1, 64 << 10);
  REQUIRE(first.ok());
  auto second = ShmInbox::create(test_name("taken"), 2, 64 << 10);
  CHECK(second.status().code() == Code::kFailedPrecondition);
  CHECK(second.status().message().find("exists already") != std::string::npos);
  auto opened = ShmInbox::open(test_name("taken"), 1);  // the first, untouched
  REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
  CHECK((*opened)->slots() == 1);
  CHECK((*opened)->ring_bytes() == (64u << 10));
  CHECK((*opened)->owner_pid() == getpid());
  CHECK(ShmInbox::open(test_name("taken"), 2).status().code() == Code::kPermissionDenied);  // not 2 rings' size
}

TEST_CASE("an inbox's name goes once every producer has attached; the mappings stay") {
  const std::string name = test_name("attached");
  auto inbox = ShmInbox::create(name, 1, 64 << 10);
  REQUIRE(inbox.ok());
  CHECK(!(*inbox)->all_attached());
  auto producer = ShmInbox::open(name, 1);
  REQUIRE(producer.ok());
  (*producer)->prefault(0);
  CHECK((*inbox)->all_attached());
  (*inbox)->remove_name();
  CHECK(ShmInbox::open(name, 1).status().code() == Code::kNotFound);  // nothing left in /dev/shm
  ShmRing out = (*producer)->ring(0), in = (*inbox)->ring(0);
  REQUIRE(out.try_write(RecordHeader{}, as_span("still mapped"), {}) == ShmRing::Write::kWritten);
  RecordHeader h;
  std::span<const std::byte> bytes;
  CHECK(in.peek(&h, &bytes) == ShmRing::Peek::kRecord);
  CHECK(bytes.size() == 12);
}

TEST_CASE("a rank whose ring holds a malformed record is reported lost, by name, on the rank it sends to") {
  // Rank 0's ring in rank 1's inbox, written by this test in rank 0's
  // place: a middle record of a message that never began; a message begun
  // whose next record's offset, added to its size, wraps past 2^64 to land
  // inside the message (it would be copied that far past its buffer).
  for (const bool wraps : {false, true}) {
    CAPTURE(wraps);
    auto ports = free_ports(2);
    auto endpoints = loopback_endpoints(ports);
    auto receiver = make_zmq_transport(1, endpoints);
    REQUIRE(receiver.ok());
    auto inbox = ShmInbox::open(inbox_name(ZmqOptions{}.shm_name_prefix, *(*receiver)->session()), 1);
    REQUIRE_MESSAGE(inbox.ok(), inbox.status().to_string());
    ShmRing ring = (*inbox)->ring(0);
    RecordHeader bad;
    bad.tag = 7;
    bad.total = 100;
    bad.offset = 50;
    if (wraps) {
      RecordHeader first = bad;
      first.flags = RecordHeader::kFirst;
      first.offset = 0;
      REQUIRE(ring.try_write(first, as_span("the first record of a message of 100 bytes"), {}) ==
              ShmRing::Write::kWritten);
      bad.offset = ~uint64_t{0} - 3;  // + 7 bytes: 3
    }
    REQUIRE(ring.try_write(bad, as_span("garbage"), {}) == ShmRing::Write::kWritten);
    std::vector<std::byte> got;
    Status status = (*receiver)->recv(0, 7, &got, in_ms(5000));
    CHECK(status.code() == Code::kUnavailable);
    CHECK(status.message().find("the shared-memory ring from rank 0 holds a malformed record") != std::string::npos);
    CHECK((*receiver)->peer_lost(0));
  }
}

TEST_CASE("shared memory: messages larger than a ring, and an empty one behind them on a full ring, all arrive") {
  // 1 MiB messages are two records each in a 4 MiB ring: the sender waits
  // for room, the ring wraps, and the empty message (one record of no
  // bytes) must still be written once there is room, not taken as sent.
  auto transports = testing::make_world(testing::Kind::kShm, 2);
  std::vector<std::byte> big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(i * 7);
  std::thread sender([&] {
    for (int i = 0; i < 8; ++i) CHECK(transports[0]->send(1, 1, {}, big).ok());
    CHECK(transports[0]->send(1, 2, {}, {}).ok());
  });
  for (int i = 0; i < 8; ++i) {
    std::vector<std::byte> got;
    Status s = transports[1]->recv(0, 1, &got, in_ms(10000));
    REQUIRE_MESSAGE(s.ok(), s.to_string());
    CHECK(got == big);
  }
  std::vector<std::byte> got;
  Status s = transports[1]->recv(0, 2, &got, in_ms(10000));
  CHECK_MESSAGE(s.ok(), s.to_string());
  CHECK(got.empty());
  sender.join();
}

TEST_CASE("ranks of one address that do not see one /dev/shm fall back to TCP, in order with what was queued") {
  // Each rank names its inbox with its own prefix, as if each had a /dev/shm
  // of its own (containers with the host's network, not its IPC
  // namespace): neither finds the other's, though each has the other's
  // session id. Messages sent before the TCP connection has been up for
  // shm_fallback_after wait in the queue, then go over TCP ahead of
  // everything sent later.
  const auto endpoints = testing::loopback_endpoints(testing::free_ports(2));
  std::vector<std::unique_ptr<Transport>> transports;
  for (int rank = 0; rank < 2; ++rank) {
    ZmqOptions options;
    options.shm_name_prefix = fmt::format("/rill-test-ns{}-{}-", rank, getpid());
    options.shm_fallback_after = std::chrono::milliseconds(200);
    auto t = make_zmq_transport(rank, endpoints, options);
    REQUIRE_MESSAGE(t.ok(), t.status().to_string());
    transports.push_back(std::move(t).value());
  }
  testing::introduce(transports);
  constexpr int kEarly = 50, kLate = 50;
  auto payload = [](int from, int i) { return std::string(static_cast<size_t>(100 + i), static_cast<char>('a' + from + i % 20)); };
  std::vector<std::thread> senders;
  for (int from = 0; from < 2; ++from)
    senders.emplace_back([&, from] {
      for (int i = 0; i < kEarly; ++i) CHECK(transports[from]->send(1 - from, 3, testing::as_span(payload(from, i))).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(400));  // past the fallback
      for (int i = kEarly; i < kEarly + kLate; ++i)
        CHECK(transports[from]->send(1 - from, 3, testing::as_span(payload(from, i))).ok());
    });
  for (int to = 0; to < 2; ++to)
    for (int i = 0; i < kEarly + kLate; ++i) {
      std::vector<std::byte> got;
      Status s = transports[to]->recv(1 - to, 3, &got, testing::in_ms(10000));
      REQUIRE_MESSAGE(s.ok(), s.to_string());
      CHECK(testing::as_string(got) == payload(1 - to, i));
    }
  for (auto& t : senders) t.join();
}

TEST_CASE("a revive waits for a loss report under way, and the lane then watches the restarted process") {
  // The race a restarted agent met: rank 0's lane thread saw rank 1's old
  // process gone and was still reporting it when rank 0 revived rank 1 for
  // its new process; the report, ending after the revive, left rank 1 lost
  // for good. Here the report takes 200 ms and the revive is asked for in
  // the middle of it: it must return only once the report has ended.
  ZmqOptions options;
  options.shm_ring_bytes = 64 << 10;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> reports;
  bool report_ended = false;
  std::vector<std::string> delivered;
  auto start = [&](int rank, const std::string& name, ShmLanes::Broken broken) {
    auto lanes = ShmLanes::start(
        rank, rank == 0 ? std::vector<bool>{false, true} : std::vector<bool>{true, false}, name, options,
        [&](int, uint64_t, std::span<const std::byte> bytes, std::unique_ptr<BytesHolder>) {
          std::lock_guard lock(mu);
          delivered.emplace_back(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          cv.notify_all();
        },
        std::move(broken), [](int) { return false; }, [](uint64_t) { return false; },
        [](int) { return Clock::duration{}; },
        [](int, uint64_t, std::span<const std::byte>, std::span<const std::byte>) {
          return Status(Code::kUnavailable, "no TCP in this test");
        });
    REQUIRE_MESSAGE(lanes.ok(), lanes.status().to_string());
    return std::move(lanes).value();
  };
  auto quiet = [](int, const std::string&) {};
  auto rank0 = start(0, test_name("revive-0"), [&](int, const std::string& why) {
    {
      std::lock_guard lock(mu);
      reports.push_back(why);
      cv.notify_all();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::lock_guard lock(mu);
    report_ended = true;
  });
  auto old_process = start(1, test_name("revive-old"), quiet);
  rank0->set_peer_name(1, test_name("revive-old"));
  bool use_tcp = false;
  REQUIRE(rank0->send(1, 5, {}, as_span("to the old process"), &use_tcp).ok());  // opens its inbox
  REQUIRE(!use_tcp);
  old_process->close();
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return !reports.empty(); }));
    CHECK(reports[0].find("closed its transport") != std::string::npos);
  }
  auto new_process = start(1, test_name("revive-new"), quiet);
  rank0->set_peer_name(1, test_name("revive-new"));  // as the agents' Rejoined does, before the revive
  rank0->revive(1);
  {
    std::lock_guard lock(mu);
    CHECK_MESSAGE(report_ended, "revive returned while the old process's loss was still being reported");
    delivered.clear();
  }
  REQUIRE(rank0->send(1, 5, {}, as_span("to the new process"), &use_tcp).ok());
  {
    std::unique_lock lock(mu);
    CHECK(cv.wait_for(lock, std::chrono::seconds(10), [&] {
      return std::find(delivered.begin(), delivered.end(), "to the new process") != delivered.end();
    }));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past the lane thread's next looks at its peers
  {
    std::lock_guard lock(mu);
    CHECK(reports.size() == 1);  // the old process is not reported again
  }
  new_process->close();
  std::unique_lock lock(mu);
  CHECK(cv.wait_for(lock, std::chrono::seconds(10), [&] { return reports.size() == 2; }));  // the new one's end
  CHECK(reports.size() == 2);
}

}  // namespace rill::comm
