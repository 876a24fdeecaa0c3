// Every collective against a reference computed here; the algorithm each call names; barrier; bad sizes.
#include <algorithm>
#include <atomic>
#include <thread>

#include "comm/collectives.h"
#include "tests/comm/collectives_test_util.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

namespace {

// Runs every collective once on this rank with `count` elements; tags are
// distinct per operation. Run below for world 2, 3 and 4 over in-process and
// loopback ZeroMQ transports, with sizes that divide neither by the world
// nor by the chunk.
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
