// Collectives tests: every operation against a reference computed here, for
// world 2, 3 and 4 over in-process and loopback ZeroMQ transports, with
// sizes that divide neither by the world nor by the chunk. Inputs are small
// integers, so float sums are exact and results compare exactly.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "comm/async_collectives.h"
#include "comm/collectives.h"
#include "comm/faulty_transport.h"
#include "comm/group_transport.h"
#include "comm/rendezvous.h"
#include "tests/comm/comm_test_util.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

namespace {

float value(int rank, size_t i, int salt) { return static_cast<float>(static_cast<int>((rank * 7 + i * 13 + salt) % 17) - 8); }

std::vector<float> input(int rank, size_t count, int salt) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = value(rank, i, salt);
  return v;
}

std::vector<float> sum(int world, size_t count, int salt) {
  std::vector<float> s(count, 0.0f);
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < count; ++i) s[i] += value(r, i, salt);
  }
  return s;
}

template <typename T>
std::span<const std::byte> bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}
template <typename T>
std::span<std::byte> writable(std::vector<T>& v) {
  return std::as_writable_bytes(std::span<T>(v));
}

Status expect_equal(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  if (got.size() != want.size()) return internal_error("{}: {} elements, expected {}", what, got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) return internal_error("{}: element {} is {}, expected {}", what, i, got[i], want[i]);
  }
  return Status::ok_status();
}

// Runs every collective once on this rank with `count` elements; tags are
// distinct per operation.
Status run_all(Collectives& c, size_t count, int salt) {
  const int n = c.world(), r = c.rank();
  const std::string at = fmt::format("count {} rank {}", count, r);
  auto in = input(r, count, salt);
  auto want = sum(n, count, salt);

  std::vector<float> out(count, -1.0f);
  RILL_RETURN_IF_ERROR(c.all_reduce(in, out, 1));
  RILL_RETURN_IF_ERROR(expect_equal(out, want, "all_reduce " + at));
  std::vector<float> inplace = in;
  RILL_RETURN_IF_ERROR(c.all_reduce(inplace, inplace, 2));
  RILL_RETURN_IF_ERROR(expect_equal(inplace, want, "all_reduce in place " + at));

  BlockRange own = block_range(count, n, r);
  std::vector<float> block(own.size, -1.0f);
  RILL_RETURN_IF_ERROR(c.reduce_scatter(in, block, 3));
  RILL_RETURN_IF_ERROR(expect_equal(block, std::vector<float>(want.begin() + own.begin, want.begin() + own.begin + own.size),
                                    "reduce_scatter " + at));

  for (int root : {0, n - 1}) {
    std::vector<float> reduced(r == root ? count : 0, -1.0f);
    RILL_RETURN_IF_ERROR(c.reduce(in, reduced, root, 4));
    if (r == root) RILL_RETURN_IF_ERROR(expect_equal(reduced, want, "reduce " + at));
  }

  std::vector<float> gathered(count * n, -1.0f), all(count * n);
  for (int q = 0; q < n; ++q) {
    auto v = input(q, count, salt);
    std::copy(v.begin(), v.end(), all.begin() + q * count);
  }
  RILL_RETURN_IF_ERROR(c.all_gather(bytes(in), writable(gathered), 5));
  RILL_RETURN_IF_ERROR(expect_equal(gathered, all, "all_gather " + at));
  std::vector<float> gathered_in_place(count * n, -1.0f);
  std::copy(in.begin(), in.end(), gathered_in_place.begin() + r * count);
  RILL_RETURN_IF_ERROR(c.all_gather(writable(gathered_in_place).subspan(r * count * 4, count * 4),
                                    writable(gathered_in_place), 6));
  RILL_RETURN_IF_ERROR(expect_equal(gathered_in_place, all, "all_gather in place " + at));

  const int root = 1 % n;
  std::vector<float> broadcasted = r == root ? input(root, count, salt) : std::vector<float>(count, -1.0f);
  RILL_RETURN_IF_ERROR(c.broadcast(writable(broadcasted), root, 7));
  RILL_RETURN_IF_ERROR(expect_equal(broadcasted, input(root, count, salt), "broadcast " + at));

  std::vector<float> gathered_at_root(r == root ? count * n : 0, -1.0f);
  RILL_RETURN_IF_ERROR(c.gather(bytes(in), writable(gathered_at_root), root, 8));
  if (r == root) RILL_RETURN_IF_ERROR(expect_equal(gathered_at_root, all, "gather " + at));

  std::vector<float> piece(count, -1.0f);
  std::vector<float> source = r == root ? all : std::vector<float>();
  RILL_RETURN_IF_ERROR(c.scatter(bytes(source), writable(piece), root, 9));
  RILL_RETURN_IF_ERROR(expect_equal(piece, input(r, count, salt), "scatter " + at));

  // all_to_all: block j of rank q's input is input(q)[j-th block]; rank r
  // receives block r of every rank.
  std::vector<float> a2a_in(count * n), a2a_out(count * n, -1.0f), a2a_want(count * n);
  for (size_t i = 0; i < count * n; ++i) a2a_in[i] = value(r, i, salt + 1);
  for (int q = 0; q < n; ++q) {
    for (size_t i = 0; i < count; ++i) a2a_want[q * count + i] = value(q, r * count + i, salt + 1);
  }
  RILL_RETURN_IF_ERROR(c.all_to_all(bytes(a2a_in), writable(a2a_out), 10));
  RILL_RETURN_IF_ERROR(expect_equal(a2a_out, a2a_want, "all_to_all " + at));

  // The _v forms with uneven blocks: rank j's block is (j + 1) * count / n
  // elements long minus the previous one's end, some empty when count < n.
  std::vector<size_t> counts(static_cast<size_t>(n)), bytes_counts(static_cast<size_t>(n));
  size_t begin = 0;
  for (int j = 0; j < n; ++j) {
    size_t end = (static_cast<size_t>(j) * j + 1) * count / (static_cast<size_t>(n - 1) * (n - 1) + 1);
    if (j == n - 1) end = count;
    counts[static_cast<size_t>(j)] = end - begin;
    bytes_counts[static_cast<size_t>(j)] = counts[static_cast<size_t>(j)] * sizeof(float);
    begin = end;
  }
  size_t mine_begin = 0;
  for (int j = 0; j < r; ++j) mine_begin += counts[static_cast<size_t>(j)];
  const size_t mine = counts[static_cast<size_t>(r)];
  std::vector<float> block_v(mine, -1.0f);
  RILL_RETURN_IF_ERROR(c.reduce_scatter_v(in, block_v, counts, 13));
  RILL_RETURN_IF_ERROR(expect_equal(
      block_v, std::vector<float>(want.begin() + mine_begin, want.begin() + mine_begin + mine), "reduce_scatter_v " + at));
  // all_gather_v: rank q contributes elements [begin_q, begin_q + counts[q]) of input(q).
  std::vector<float> gathered_v(count, -1.0f), want_v(count);
  for (int q = 0, at_q = 0; q < n; at_q += static_cast<int>(counts[static_cast<size_t>(q)]), ++q) {
    auto v = input(q, count, salt);
    std::copy(v.begin() + at_q, v.begin() + at_q + counts[static_cast<size_t>(q)], want_v.begin() + at_q);
  }
  RILL_RETURN_IF_ERROR(c.all_gather_v(bytes(in).subspan(mine_begin * 4, mine * 4), writable(gathered_v), bytes_counts, 14));
  RILL_RETURN_IF_ERROR(expect_equal(gathered_v, want_v, "all_gather_v " + at));
  // all_to_all_v: rank q sends (q + j) % 3 + (count % 2) elements to rank j,
  // values value(q, j * 100 + i).
  auto a2a_len = [&](int q, int j) { return static_cast<size_t>((q + j) % 3) + count % 2; };
  std::vector<size_t> send_counts, recv_counts;
  std::vector<float> v_in, v_want;
  for (int j = 0; j < n; ++j) {
    send_counts.push_back(a2a_len(r, j) * 4);
    recv_counts.push_back(a2a_len(j, r) * 4);
    for (size_t i = 0; i < a2a_len(r, j); ++i) v_in.push_back(value(r, static_cast<size_t>(j) * 100 + i, salt));
    for (size_t i = 0; i < a2a_len(j, r); ++i) v_want.push_back(value(j, static_cast<size_t>(r) * 100 + i, salt));
  }
  std::vector<float> v_out(v_want.size(), -1.0f);
  RILL_RETURN_IF_ERROR(c.all_to_all_v(bytes(v_in), send_counts, writable(v_out), recv_counts, 15));
  RILL_RETURN_IF_ERROR(expect_equal(v_out, v_want, "all_to_all_v " + at));

  if (n > 1) {
    std::vector<float> p2p(count, -1.0f);
    if (r == 0) RILL_RETURN_IF_ERROR(c.send(n - 1, bytes(in), 11));
    if (r == n - 1) {
      RILL_RETURN_IF_ERROR(c.recv(0, writable(p2p), 11));
      RILL_RETURN_IF_ERROR(expect_equal(p2p, input(0, count, salt), "send/recv " + at));
    }
  }
  return c.barrier(12);
}

}  // namespace

TEST_CASE("every collective matches the reference for world 2, 3, 4 and odd sizes") {
  for (Kind kind : kAllKinds) {
    for (int world : {2, 3, 4}) {
      CAPTURE(kind_name(kind));
      CAPTURE(world);
      auto transports = make_world(kind, world);
      auto statuses = run_ranks(world, [&](int rank) -> Status {
        // 4 KiB chunks: 1024 floats, so 10007 elements are many uneven
        // chunks. all_reduce runs as a ring, then (small sizes) direct.
        for (size_t direct_bytes : {size_t{0}, size_t{8192}}) {
          Collectives c(*transports[rank], CollectiveOptions{4096, std::chrono::milliseconds(20000), direct_bytes});
          int salt = 0;
          for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{1031}, size_t{10007}}) {
            RILL_RETURN_IF_ERROR(run_all(c, count, salt++));
          }
        }
        return Status::ok_status();
      });
      check_all_ok(statuses);
    }
  }
}

TEST_CASE("all_reduce of a large tensor over zmq with the default chunk") {
  // Over TCP, and through shared-memory rings (12 MiB: three rings' worth,
  // so messages wrap around and are cut into several records).
  for (Kind kind : {Kind::kZmq, Kind::kShm}) {
    CAPTURE(kind_name(kind));
    const int world = 3;
    auto transports = make_world(kind, world);
    const size_t count = (size_t{3} << 20) + 7;  // 12 MiB, several 1 MiB chunks per block
    auto statuses = run_ranks(world, [&](int rank) -> Status {
      Collectives c(*transports[rank]);
      auto in = input(rank, count, 5);
      std::vector<float> out(count);
      RILL_RETURN_IF_ERROR(c.all_reduce(in, out, 1));
      return expect_equal(out, sum(world, count, 5), fmt::format("rank {}", rank));
    });
    check_all_ok(statuses);
  }
}

// 64 MiB tensors, world 2 and 3, over TCP and shared memory: many 1 MiB
// chunks per ring step and messages far larger than a ring. The element
// count (2^24 + 5) divides by neither world, so blocks are uneven.
TEST_CASE("64 MiB: all_reduce, reduce_scatter, all_gather, broadcast and all_to_all over tcp and shared memory") {
  const size_t count = (size_t{1} << 24) + 5;
  for (Kind kind : {Kind::kZmq, Kind::kShm}) {
    for (int world : {2, 3}) {
      CAPTURE(kind_name(kind));
      CAPTURE(world);
      auto transports = make_world(kind, world);
      const auto want = sum(world, count, 9);
      auto statuses = run_ranks(world, [&](int rank) -> Status {
        Collectives c(*transports[rank]);
        const std::string at = fmt::format("rank {}", rank);
        auto in = input(rank, count, 9);
        std::vector<float> out(count, -1.0f);
        RILL_RETURN_IF_ERROR(c.all_reduce(in, out, 1));
        RILL_RETURN_IF_ERROR(expect_equal(out, want, "all_reduce " + at));
        if (std::string(c.last_algorithm()) != "ring")
          return internal_error("a 64 MiB all_reduce ran as '{}', not the ring", c.last_algorithm());

        const BlockRange own = block_range(count, world, rank);
        std::vector<float> block(own.size, -1.0f);
        RILL_RETURN_IF_ERROR(c.reduce_scatter(in, block, 2));
        RILL_RETURN_IF_ERROR(expect_equal(
            block, std::vector<float>(want.begin() + own.begin, want.begin() + own.begin + own.size), "reduce_scatter " + at));

        // all_gather of each rank's block of its input: the result is the
        // blocks of every rank's input side by side (64 MiB in all).
        std::vector<size_t> block_bytes;
        std::vector<float> gathered_want(count);
        for (int q = 0; q < world; ++q) {
          const BlockRange b = block_range(count, world, q);
          block_bytes.push_back(b.size * sizeof(float));
          for (size_t i = 0; i < b.size; ++i) gathered_want[b.begin + i] = value(q, b.begin + i, 9);
        }
        std::fill(out.begin(), out.end(), -1.0f);
        RILL_RETURN_IF_ERROR(c.all_gather_v(bytes(in).subspan(own.begin * 4, own.size * 4), writable(out), block_bytes, 3));
        RILL_RETURN_IF_ERROR(expect_equal(out, gathered_want, "all_gather " + at));

        std::vector<float> broadcasted = rank == world - 1 ? in : std::vector<float>(count, -1.0f);
        RILL_RETURN_IF_ERROR(c.broadcast(writable(broadcasted), world - 1, 4));
        RILL_RETURN_IF_ERROR(expect_equal(broadcasted, input(world - 1, count, 9), "broadcast " + at));

        // all_to_all over whole blocks of 64 MiB / world bytes each.
        const size_t per = count / static_cast<size_t>(world);
        std::vector<float> a2a_in(in.begin(), in.begin() + per * world), a2a_out(per * world, -1.0f), a2a_want(per * world);
        for (int q = 0; q < world; ++q) {
          for (size_t i = 0; i < per; ++i) a2a_want[q * per + i] = value(q, rank * per + i, 9);
        }
        RILL_RETURN_IF_ERROR(c.all_to_all(bytes(a2a_in), writable(a2a_out), 5));
        return expect_equal(a2a_out, a2a_want, "all_to_all " + at);
      });
      check_all_ok(statuses);
    }
  }
}

TEST_CASE("world 1: every collective is a local copy") {
  auto transports = make_inproc_transports(1);
  Collectives c(*transports[0]);
  CHECK(std::string(c.last_op()).empty());
  REQUIRE(run_all(c, 37, 3).ok());
  CHECK(std::string(c.last_op()) == "barrier");
  CHECK(std::string(c.last_algorithm()) == "local");
}

TEST_CASE("each call names its algorithm: all_reduce is one direct exchange up to direct_bytes, then the ring") {
  auto transports = make_inproc_transports(2);
  auto statuses = run_ranks(2, [&](int rank) -> Status {
    Collectives c(*transports[rank], CollectiveOptions{4096, std::chrono::milliseconds(20000), 1024});
    std::vector<float> small(256, 1.0f), large(257, 1.0f);  // 1024 bytes, then 1028
    std::vector<std::string> seen;
    RILL_RETURN_IF_ERROR(c.all_reduce(small, small, 1));
    seen.push_back(fmt::format("{} {}", c.last_op(), c.last_algorithm()));
    RILL_RETURN_IF_ERROR(c.all_reduce(large, large, 1));
    seen.push_back(fmt::format("{} {}", c.last_op(), c.last_algorithm()));
    RILL_RETURN_IF_ERROR(c.broadcast(writable(large), 0, 2));
    seen.push_back(fmt::format("{} {}", c.last_op(), c.last_algorithm()));
    RILL_RETURN_IF_ERROR(c.barrier(3));
    seen.push_back(fmt::format("{} {}", c.last_op(), c.last_algorithm()));
    const std::vector<std::string> want = {"all_reduce direct", "all_reduce ring", "broadcast pipelined chain",
                                           "barrier dissemination"};
    if (seen != want) return internal_error("rank {} saw {}", rank, fmt::join(seen, ", "));
    return Status::ok_status();
  });
  check_all_ok(statuses);
}

TEST_CASE("repeated all_reduce (ring and direct) and reduce_scatter keep their scratch and stay correct") {
  const int world = 3;
  auto transports = make_inproc_transports(world);
  auto statuses = run_ranks(world, [&](int rank) -> Status {
    Collectives ring(*transports[rank], CollectiveOptions{1000, std::chrono::milliseconds(10000), 0});
    Collectives direct(*transports[rank]);
    const size_t count = 4099;
    auto in = input(rank, count, 1);
    std::vector<float> out(count), block(block_range(count, world, rank).size), inplace;
    size_t ring_scratch = 0, direct_scratch = 0;
    for (int i = 0; i < 5; ++i) {
      RILL_RETURN_IF_ERROR(ring.all_reduce(in, out, 1));
      RILL_RETURN_IF_ERROR(expect_equal(out, sum(world, count, 1), "all_reduce"));
      RILL_RETURN_IF_ERROR(ring.reduce_scatter(in, block, 2));
      inplace = in;
      RILL_RETURN_IF_ERROR(direct.all_reduce(inplace, inplace, 3));
      RILL_RETURN_IF_ERROR(expect_equal(inplace, sum(world, count, 1), "direct all_reduce in place"));
      if (i == 0) ring_scratch = ring.scratch_bytes(), direct_scratch = direct.scratch_bytes();
      if (ring.scratch_bytes() != ring_scratch || direct.scratch_bytes() != direct_scratch) {
        return internal_error("scratch grew on call {}", i);
      }
    }
    return Status::ok_status();
  });
  check_all_ok(statuses);
}

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

TEST_CASE("barrier holds every rank until all entered") {
  const int world = 4;
  auto transports = make_zmq_world(world);
  std::atomic<int> entered{0};
  auto statuses = run_ranks(world, [&](int rank) -> Status {
    Collectives c(*transports[rank]);
    for (int round = 0; round < 3; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(rank * 20));
      entered++;
      RILL_RETURN_IF_ERROR(c.barrier(7));
      if (entered.load() < world * (round + 1)) return internal_error("left barrier {} early", round);
      RILL_RETURN_IF_ERROR(c.barrier(8));  // nobody enters the next round before all checked
    }
    return Status::ok_status();
  });
  check_all_ok(statuses);
}

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

TEST_CASE("size mismatches are invalid arguments and leave the object usable") {
  auto transports = make_inproc_transports(2);
  Collectives c(*transports[0]);
  std::vector<float> a(10), b(9);
  CHECK(c.all_reduce(a, b, 1).code() == Code::kInvalidArgument);
  CHECK(c.reduce_scatter(a, b, 1).code() == Code::kInvalidArgument);
  CHECK(c.all_gather(bytes(a), writable(b), 1).code() == Code::kInvalidArgument);
  std::vector<std::byte> odd(3);
  CHECK(c.all_to_all(odd, odd, 1).code() == Code::kInvalidArgument);
  const std::vector<size_t> wrong_counts = {1, 1, 1};  // three blocks for two ranks
  CHECK(c.all_gather_v(bytes(a), writable(b), wrong_counts, 1).code() == Code::kInvalidArgument);
  const std::vector<size_t> short_counts = {1, 1};  // sums to 2, the buffer is longer
  CHECK(c.reduce_scatter_v(a, b, short_counts, 1).code() == Code::kInvalidArgument);
  CHECK(c.broadcast(writable(a), 2, 1).code() == Code::kInvalidArgument);
  CHECK(c.send(0, bytes(a), 1).code() == Code::kInvalidArgument);
  std::vector<float> small(2);
  std::vector<float> sent = {1.0f, 2.0f, 3.0f};
  Collectives c1(*transports[1]);
  REQUIRE(c1.send(0, bytes(sent), 2).ok());
  Status status = c.recv(1, writable(small), 2);
  CHECK(status.code() == Code::kDataLoss);
  CHECK(status.message().find("has 12 bytes, expected 8") != std::string::npos);
  // Bytes that are no collective's message at all (a fresh object: the
  // data loss above ends this one).
  REQUIRE(transports[1]->send(0, 3, {}, bytes(sent)).ok());
  Collectives fresh(*transports[0]);
  status = fresh.recv(1, writable(small), 3);
  CHECK(status.code() == Code::kDataLoss);
  CHECK(status.message().find("shorter than the 16-byte header") != std::string::npos);
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

// Each reduce op against a reference combined here. Inputs are small
// integers (-8..8), so sums and products of up to 3 of them are exact in
// float whatever the order, max and min are exact, and the average is the
// exact sum divided once by the world size, as the collectives do: every
// result compares with ==.
TEST_CASE("all_reduce, reduce_scatter and reduce with every reduce op, ring and direct, world 1 to 3") {
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct, ReduceOp::kAverage};
  auto reference = [](ReduceOp op, int world, size_t count, int salt) {
    std::vector<float> want = input(0, count, salt);
    for (int r = 1; r < world; ++r)
      for (size_t i = 0; i < count; ++i) {
        const float v = value(r, i, salt);
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAverage: want[i] += v; break;
          case ReduceOp::kMax: want[i] = std::max(want[i], v); break;
          case ReduceOp::kMin: want[i] = std::min(want[i], v); break;
          case ReduceOp::kProduct: want[i] *= v; break;
        }
      }
    if (op == ReduceOp::kAverage)
      for (float& v : want) v /= static_cast<float>(world);
    return want;
  };
  for (int world : {1, 2, 3}) {
    CAPTURE(world);
    auto transports = make_inproc_transports(world);
    auto statuses = run_ranks(world, [&](int rank) -> Status {
      for (size_t direct_bytes : {size_t{0}, size_t{1} << 20}) {
        Collectives c(*transports[rank], CollectiveOptions{4096, std::chrono::milliseconds(20000), direct_bytes});
        uint64_t tag = 1;
        for (size_t count : {size_t{1}, size_t{7}, size_t{3001}}) {
          for (ReduceOp op : ops) {
            const std::string at =
                fmt::format("{} count {} rank {} direct {}", reduce_op_name(op), count, rank, direct_bytes);
            const int salt = static_cast<int>(count) + static_cast<int>(op);
            const auto in = input(rank, count, salt);
            const auto want = reference(op, world, count, salt);
            std::vector<float> out(count, -1.0f);
            RILL_RETURN_IF_ERROR(c.all_reduce(in, out, tag++, op));
            RILL_RETURN_IF_ERROR(expect_equal(out, want, "all_reduce " + at));
            std::vector<float> inplace = in;
            RILL_RETURN_IF_ERROR(c.all_reduce(inplace, inplace, tag++, op));
            RILL_RETURN_IF_ERROR(expect_equal(inplace, want, "all_reduce in place " + at));
            const BlockRange own = block_range(count, world, rank);
            std::vector<float> block(own.size, -1.0f);
            RILL_RETURN_IF_ERROR(c.reduce_scatter(in, block, tag++, op));
            RILL_RETURN_IF_ERROR(expect_equal(
                block, std::vector<float>(want.begin() + own.begin, want.begin() + own.begin + own.size),
                "reduce_scatter " + at));
            std::vector<float> reduced(rank == world - 1 ? count : 0, -1.0f);
            RILL_RETURN_IF_ERROR(c.reduce(in, reduced, world - 1, tag++, op));
            if (rank == world - 1) RILL_RETURN_IF_ERROR(expect_equal(reduced, want, "reduce " + at));
          }
        }
        // Max and min carry a NaN from any rank to every rank.
        std::vector<float> nan_in(5, static_cast<float>(rank));
        if (rank == world - 1) nan_in[2] = std::nanf("");
        for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
          std::vector<float> out(5);
          RILL_RETURN_IF_ERROR(c.all_reduce(nan_in, out, tag++, op));
          if (!std::isnan(out[2]) || std::isnan(out[0]))
            return internal_error("{} of a NaN on rank {}: {} {}", reduce_op_name(op), world - 1, out[0], out[2]);
        }
      }
      return Status::ok_status();
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
