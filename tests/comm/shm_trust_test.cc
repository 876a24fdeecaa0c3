// Shared memory and the other users of a machine (comm/shm_ring.h,
// comm/shm_lanes.h): an inbox another user made, one open to others, a link
// or an object of the wrong size is never opened, and its rank is sent to
// over TCP; sizes and positions rewritten after a sender attached never make
// it write outside its ring. The cases that play another user (uid and gid
// 4242, which need no passwd entry) need root, as CI runs the suite; they
// say so and skip elsewhere.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "comm/data_cipher.h"
#include "comm/shm_lanes.h"
#include "comm/shm_ring.h"
#include "tests/comm/comm_test_util.h"

namespace rill::comm {
namespace {

using testing::as_span;
using testing::as_string;
using testing::in_ms;

constexpr uid_t kStranger = 4242;

std::string test_name(const char* what) { return fmt::format("/rill-test-{}-{}", what, getpid()); }

// Runs `body` in a child process (as uid and gid kStranger when `stranger`)
// and returns its exit code: 77 when it could not become that user, 128 + the signal that
// ended it, or -1 when it ran past 10 s (a few system calls take
// milliseconds: the bound only keeps a hung child from hanging the test).
int in_child(const std::function<int()>& body, bool stranger) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (stranger && (setgroups(0, nullptr) != 0 || setgid(kStranger) != 0 || setuid(kStranger) != 0)) _exit(77);
    _exit(body());
  }
  const auto until = Clock::now() + std::chrono::seconds(10);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
int as_stranger(const std::function<int()>& body) { return in_child(body, true); }

// Plants an inbox of `slots` rings of `ring_bytes` under `name` as the
// stranger: a real one, marked closed by a creator that has exited, so a
// sender that believed its header would report its rank gone. The name
// stays (the child exits without unmapping or removing anything).
void plant_as_stranger(const std::string& name, int slots, size_t ring_bytes) {
  const int code = as_stranger([&] {
    auto inbox = ShmInbox::create(name, slots, ring_bytes);
    if (!inbox.ok()) return 1;
    (*inbox)->mark_closed();
    (void)inbox->release();  // _exit follows: no destructor removes the name
    return 0;
  });
  REQUIRE_MESSAGE(code == 0, "planting as uid ", kStranger, " ended with ", code);
}

void set_mode(const std::string& name, mode_t mode) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_NOFOLLOW, 0);
  REQUIRE(fd >= 0);
  REQUIRE(fchmod(fd, mode) == 0);
  ::close(fd);
}

// The bytes of the shared-memory object `name`.
std::vector<std::byte> contents(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDONLY | O_NOFOLLOW, 0);
  REQUIRE(fd >= 0);
  struct stat st {};
  REQUIRE(fstat(fd, &st) == 0);
  std::vector<std::byte> bytes(static_cast<size_t>(st.st_size));
  REQUIRE(pread(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  return bytes;
}

bool exists(const std::string& name) { return access(("/dev/shm" + name).c_str(), F_OK) == 0; }

}  // namespace

TEST_CASE("an inbox that is not this user's own is refused, saying what is wrong and nothing it holds") {
  const std::string name = test_name("trust");
  shm_unlink(name.c_str());
  {
    // This user's, but open to others.
    auto inbox = ShmInbox::create(name, 1, 64 << 10);
    REQUIRE(inbox.ok());
    set_mode(name, 0644);
    auto opened = ShmInbox::open(name, 1);
    CHECK(opened.status().code() == Code::kPermissionDenied);
    CHECK(opened.status().message() == fmt::format("shared memory '{}' has mode 0644, not 0600", name));
  }
  {
    // Sized for two rings where one is expected; then a header that says
    // other sizes than the object has.
    auto inbox = ShmInbox::create(name, 2, 64 << 10);
    REQUIRE(inbox.ok());
    auto one = ShmInbox::open(name, 1);
    CHECK(one.status().code() == Code::kPermissionDenied);
    CHECK(one.status().message().find("bytes: not an inbox of 1 ring(s)") != std::string::npos);
    const int fd = shm_open(name.c_str(), O_RDWR, 0);
    REQUIRE(fd >= 0);
    const uint64_t claimed = uint64_t{1} << 20;  // the header's ring size, at byte 8 (shm_ring.cc)
    REQUIRE(pwrite(fd, &claimed, sizeof claimed, 8) == static_cast<ssize_t>(sizeof claimed));
    ::close(fd);
    auto two = ShmInbox::open(name, 2);
    CHECK(two.status().code() == Code::kPermissionDenied);
    CHECK(two.status().message() == fmt::format("shared memory '{}' holds a header that does not match its size", name));
  }
  {
    // A symbolic link where an inbox would be: neither followed nor replaced.
    auto target = ShmInbox::create(name + "-target", 1, 64 << 10);
    REQUIRE(target.ok());
    REQUIRE(symlink(("/dev/shm" + name + "-target").c_str(), ("/dev/shm" + name).c_str()) == 0);
    auto opened = ShmInbox::open(name, 1);
    CHECK(opened.status().code() == Code::kPermissionDenied);
    CHECK(opened.status().message().find("cannot be opened") != std::string::npos);
    CHECK(ShmInbox::create(name, 1, 64 << 10).status().code() == Code::kFailedPrecondition);
    ::unlink(("/dev/shm" + name).c_str());
  }
  if (geteuid() != 0) {
    MESSAGE("skipped the other user's inbox: playing another user needs root");
    return;
  }
  // Another user's, mode 0600: root could open it, this process must not.
  plant_as_stranger(name, 1, 64 << 10);
  const std::vector<std::byte> before = contents(name);
  auto opened = ShmInbox::open(name, 1);
  CHECK(opened.status().code() == Code::kPermissionDenied);
  CHECK(opened.status().message() ==
        fmt::format("shared memory '{}' is owned by uid {}, not by this process's 0", name, kStranger));
  auto taken = ShmInbox::create(name, 1, 64 << 10);  // nor is it taken over
  CHECK(taken.status().code() == Code::kFailedPrecondition);
  CHECK(contents(name) == before);
  shm_unlink(name.c_str());
}

TEST_CASE("a rank whose inbox name another user took first, or that is open to others, is sent to over TCP") {
  // An attacker who somehow learnt rank 1's session id before rank 1
  // started plants an inbox under its name: rank 1 cannot create its own,
  // rank 0 refuses the planted one, and both talk over TCP. Nothing is
  // written into the planted inbox, and nothing in it is believed: it says
  // its creator closed it, which would make rank 0 report rank 1 gone.
  for (const bool stranger : {true, false}) {
    CAPTURE(stranger);
    if (stranger && geteuid() != 0) {
      MESSAGE("skipped the other user's inbox: playing another user needs root");
      continue;
    }
    const SessionId session = new_session_id();
    const std::string name = inbox_name(ZmqOptions{}.shm_name_prefix, session);
    std::unique_ptr<ShmInbox> ours;  // planted by this user, mode 0644
    if (stranger) {
      plant_as_stranger(name, 1, ZmqOptions{}.shm_ring_bytes);
    } else {
      auto planted = ShmInbox::create(name, 1, ZmqOptions{}.shm_ring_bytes);
      REQUIRE(planted.ok());
      ours = std::move(*planted);
      ours->mark_closed();
      set_mode(name, 0644);
    }
    const std::vector<std::byte> before = contents(name);
    const auto endpoints = testing::loopback_endpoints(testing::free_ports(2));
    ZmqOptions options;
    options.session = session;
    auto rank0 = make_zmq_transport(0, endpoints);
    REQUIRE_MESSAGE(rank0.ok(), rank0.status().to_string());
    auto rank1 = make_zmq_transport(1, endpoints, options);
    REQUIRE_MESSAGE(rank1.ok(), rank1.status().to_string());
    testing::introduce({rank0->get(), rank1->get()});
    Transport* ranks[2] = {rank0->get(), rank1->get()};
    const std::string large(3 << 20, 'x');  // several records' worth, had it gone through a ring
    for (int from : {0, 1}) {
      for (int i = 0; i < 20; ++i) REQUIRE(ranks[from]->send(1 - from, 5, as_span(fmt::format("message {}", i))).ok());
      REQUIRE(ranks[from]->send(1 - from, 6, as_span(large)).ok());
    }
    for (int to : {0, 1}) {
      std::vector<std::byte> got;
      for (int i = 0; i < 20; ++i) {
        Status s = ranks[to]->recv(1 - to, 5, &got, in_ms(10000));
        REQUIRE_MESSAGE(s.ok(), s.to_string());
        CHECK(as_string(got) == fmt::format("message {}", i));
      }
      Status s = ranks[to]->recv(1 - to, 6, &got, in_ms(10000));
      REQUIRE_MESSAGE(s.ok(), s.to_string());
      CHECK(got.size() == large.size());
    }
    // Rank 0's lane thread looks at its peers every 50 ms: four looks.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK_FALSE(ranks[0]->peer_lost(1));
    CHECK_FALSE(ranks[1]->peer_lost(0));
    CHECK(contents(name) == before);
    // Rank 0's own inbox, which rank 1 never attached to, goes with its
    // transport.
    const std::string own = inbox_name(ZmqOptions{}.shm_name_prefix, *ranks[0]->session());
    CHECK(exists(own));
    rank0->reset();
    rank1->reset();
    CHECK_FALSE(exists(own));
    if (stranger) shm_unlink(name.c_str());
  }
}

TEST_CASE("sizes and positions rewritten after a sender attached never move its writes outside its ring") {
  // Two rings of 64 KiB: the sender's is ring 0, so a write past its end
  // would land in ring 1's positions. The offsets below are shm_ring.cc's
  // layout: a 256-byte inbox header (ring size at byte 8, total size at 16,
  // rings at 24, creator's pid at 28), then per ring 256 bytes of positions
  // (head at 0, tail at 64) and its bytes.
  constexpr size_t kRing = 64 << 10, kHeader = 256, kControl = 256, kTotal = kHeader + 2 * (kControl + kRing);
  const std::string name = test_name("hostile");
  auto inbox = ShmInbox::create(name, 2, kRing);
  REQUIRE(inbox.ok());
  auto sender = ShmInbox::open(name, 2);
  REQUIRE(sender.ok());
  (*sender)->prefault(0);
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  REQUIRE(fd >= 0);
  void* raw = mmap(nullptr, kTotal, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(raw != MAP_FAILED);
  auto* bytes = static_cast<std::byte*>(raw);
  auto put = [&](size_t at, auto value) { std::memcpy(bytes + at, &value, sizeof value); };
  const size_t head = kHeader, tail = kHeader + 64, ring0 = kHeader + kControl, ring1 = ring0 + kRing;
  const std::vector<std::byte> ring1_before(bytes + ring1, bytes + kTotal);

  put(8, uint64_t{1} << 40);
  put(16, ~uint64_t{0});
  put(24, int32_t{1} << 30);
  put(28, int32_t{1});
  // What the sender knows was copied when it opened the inbox.
  CHECK((*sender)->slots() == 2);
  CHECK((*sender)->ring_bytes() == kRing);
  CHECK((*sender)->owner_pid() == getpid());
  (*sender)->prefault(0);  // clears ring 0 again, and nothing beyond it
  ShmRing out = (*sender)->ring(0);
  CHECK(out.max_record_bytes() == kRing / 4 - sizeof(RecordHeader));
  const std::string payload(100, 'p');
  // A head 8 bytes short of the ring's end (no record is 8-aligned there).
  put(head, uint64_t{kRing - 8});
  put(tail, uint64_t{kRing - 8});
  CHECK(out.try_write(RecordHeader{}, as_span(payload), {}) == ShmRing::Write::kCorrupt);
  // A head more than a ring ahead of its tail; a tail ahead of its head.
  put(head, uint64_t{1} << 20);
  put(tail, uint64_t{0});
  CHECK(out.try_write(RecordHeader{}, as_span(payload), {}) == ShmRing::Write::kCorrupt);
  put(head, uint64_t{0});
  put(tail, uint64_t{4096});
  CHECK(out.try_write(RecordHeader{}, as_span(payload), {}) == ShmRing::Write::kCorrupt);
  // A full ring is only full.
  put(head, uint64_t{kRing});
  put(tail, uint64_t{0});
  CHECK(out.try_write(RecordHeader{}, as_span(payload), {}) == ShmRing::Write::kFull);
  // Positions a ring can hold, 32 bytes before its end: a wrap marker there,
  // the record at the start, read back by the consumer.
  put(head, uint64_t{kRing - 32});
  put(tail, uint64_t{kRing - 32});
  RecordHeader record;
  record.tag = 9;
  REQUIRE(out.try_write(record, as_span(payload), {}) == ShmRing::Write::kWritten);
  ShmRing in = (*inbox)->ring(0);
  RecordHeader got;
  std::span<const std::byte> got_bytes;
  REQUIRE(in.peek(&got, &got_bytes) == ShmRing::Peek::kRecord);
  CHECK(got.tag == 9);
  CHECK(as_string(got_bytes) == payload);
  // The record's size rewritten between peek and pop: pop moves past what
  // peek checked, and the ring is empty.
  put(ring0, uint32_t{0x7fffffff});
  in.pop();
  CHECK(in.empty());
  CHECK(std::vector<std::byte>(bytes + ring1, bytes + kTotal) == ring1_before);
  munmap(raw, kTotal);
}

// An agent killed before its peers attached leaves its inbox's name, and
// with it the rings' memory; the next agent of this user removes it. Only
// what is surely such a leftover goes: this user's inbox, as made (mode
// 0600), untouched for the age given, its creator's pid gone.
TEST_CASE("an inbox whose creator died before removing it is removed by the next agent; no other is") {
  const std::string prefix = fmt::format("/rill-test-sweep-{}-", getpid());
  auto left_by_dead = [&](const std::string& what) {
    const std::string name = prefix + what;
    shm_unlink(name.c_str());
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      auto inbox = ShmInbox::create(name, 1, 64 << 10);
      if (inbox.ok()) (void)inbox->release();  // _exit follows: no destructor removes the name
      _exit(inbox.ok() ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);  // reaped: its pid is gone
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    REQUIRE(exists(name));
    return name;
  };
  const std::string dead = left_by_dead("dead");
  const std::string opened_up = left_by_dead("mode");
  set_mode(opened_up, 0644);  // not as an inbox is made: not ours to judge
  const std::string live = prefix + "live";
  shm_unlink(live.c_str());
  auto alive = ShmInbox::create(live, 1, 64 << 10);  // its creator: this process
  REQUIRE(alive.ok());
  const std::string stranger = prefix + "stranger";
  const bool root = geteuid() == 0;
  if (root) plant_as_stranger(stranger, 1, 64 << 10);  // its creator exited too, but it is another user's
  else MESSAGE("not root: the case of another user's inbox is skipped");

  // Younger than the age given: kept, whatever its pid says.
  CHECK(ShmInbox::remove_stale(prefix, std::chrono::hours(1)).empty());
  CHECK(exists(dead));
  CHECK(ShmInbox::remove_stale(prefix, std::chrono::seconds(0)) == std::vector<std::string>{dead});
  CHECK_FALSE(exists(dead));
  CHECK(exists(opened_up));
  CHECK(exists(live));
  if (root) CHECK(exists(stranger));
  // The live inbox still works for a sender.
  CHECK(ShmInbox::open(live, 1).ok());
  // What another user may put under the prefix (a FIFO anyone may open,
  // whose open would wait for a writer; a folder; a link to an inbox) is
  // left alone, and the scan does not wait on it (in a child, bounded).
  const std::string fifo = "/dev/shm" + prefix + "fifo", folder = "/dev/shm" + prefix + "folder",
                    link = "/dev/shm" + prefix + "link";
  REQUIRE(mkfifo(fifo.c_str(), 0666) == 0);
  REQUIRE(chmod(fifo.c_str(), 0666) == 0);
  REQUIRE(mkdir(folder.c_str(), 0700) == 0);
  REQUIRE(symlink(("/dev/shm" + live).c_str(), link.c_str()) == 0);
  CHECK(in_child([&] { return ShmInbox::remove_stale(prefix, std::chrono::seconds(0)).empty() ? 0 : 1; }, false) == 0);
  CHECK(access(fifo.c_str(), F_OK) == 0);
  CHECK(access(folder.c_str(), F_OK) == 0);
  CHECK(exists(live));
  ::unlink(fifo.c_str());
  ::rmdir(folder.c_str());
  ::unlink(link.c_str());
  // A prefix that is not one name's start in /dev/shm removes nothing.
  CHECK(ShmInbox::remove_stale("/", std::chrono::seconds(0)).empty());
  CHECK(ShmInbox::remove_stale(prefix + "x/", std::chrono::seconds(0)).empty());
  for (const std::string& name : {opened_up, stranger}) shm_unlink(name.c_str());
}

}  // namespace rill::comm
