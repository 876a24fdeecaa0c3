// Every collective that moves data, at 64 MiB: world 2 and 3, TCP and shared memory, element by element.
#include <algorithm>

#include "comm/collectives.h"
#include "tests/comm/collectives_test_util.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

namespace {

// got[i] == want(i) for every i, got holding `size` elements: the expected
// values are computed as compared, never held (at 64 MiB each copy would be
// one more buffer per rank).
template <typename Want>
Status expect_each(std::span<const float> got, size_t size, const Want& want, const std::string& what) {
  if (got.size() != size) return internal_error("{}: {} elements, expected {}", what, got.size(), size);
  for (size_t i = 0; i < size; ++i) {
    const float expected = want(i);
    if (got[i] != expected) return internal_error("{}: element {} is {}, expected {}", what, i, got[i], expected);
  }
  return Status::ok_status();
}

}  // namespace

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

// The other collectives at 64 MiB, in the same worlds and over the same
// transports: reduce (a chain ending at the last rank), reduce_scatter_v with
// blocks weighted 1, 2, 3 by rank, all_gather (the case above gathers with
// all_gather_v), gather and scatter over equal blocks of 64 MiB / world
// bytes, all_to_all_v with blocks that differ by direction (about 64 MiB
// each way per rank), and one 64 MiB send/recv. barrier carries no data.
TEST_CASE("64 MiB: reduce, reduce_scatter_v, all_gather, gather, scatter, all_to_all_v and send/recv over tcp and shared memory") {
  const size_t count = (size_t{1} << 24) + 5;
  const int salt = 11;
  for (Kind kind : {Kind::kZmq, Kind::kShm}) {
    for (int world : {2, 3}) {
      CAPTURE(kind_name(kind));
      CAPTURE(world);
      auto transports = make_world(kind, world);
      const auto want = sum(world, count, salt);
      const size_t n = static_cast<size_t>(world);
      std::vector<size_t> counts(n);  // reduce_scatter_v: rank j's block weighs j + 1
      for (size_t j = 0, given = 0; j < n; given += counts[j], ++j)
        counts[j] = j + 1 == n ? count - given : count * (j + 1) / (n * (n + 1) / 2);
      const size_t per = count / n;  // all_gather, gather, scatter: equal blocks
      // all_to_all_v: rank q sends rank j the next a2a_len(q, j) elements of
      // its input, in rank order.
      const size_t base = per - n * 4099;
      auto a2a_len = [&](size_t q, size_t j) { return base + (q + 2 * j) % n * 4099; };
      auto a2a_start = [&](size_t q, size_t j) {
        size_t start = 0;
        for (size_t k = 0; k < j; ++k) start += a2a_len(q, k);
        return start;
      };
      auto statuses = run_ranks(world, [&](int rank_index) -> Status {
        Collectives c(*transports[rank_index]);
        const size_t rank = static_cast<size_t>(rank_index);
        const std::string at = fmt::format("rank {}", rank);
        const auto in = input(rank_index, count, salt);
        const int root = world - 1;

        std::vector<float> out(rank_index == root ? count : 0, -1.0f);
        RILL_RETURN_IF_ERROR(c.reduce(in, out, root, 1));
        if (rank_index == root) RILL_RETURN_IF_ERROR(expect_equal(out, want, "reduce " + at));

        size_t mine = 0;
        for (size_t j = 0; j < rank; ++j) mine += counts[j];
        out.assign(counts[rank], -1.0f);
        RILL_RETURN_IF_ERROR(c.reduce_scatter_v(in, out, counts, 2));
        RILL_RETURN_IF_ERROR(
            expect_each(out, counts[rank], [&](size_t i) { return want[mine + i]; }, "reduce_scatter_v " + at));

        // Block q of all_gather's and gather's result: rank q's elements
        // [q * per, (q + 1) * per).
        auto gathered = [&](size_t i) { return value(static_cast<int>(i / per), i, salt); };
        const auto own_block = bytes(in).subspan(rank * per * sizeof(float), per * sizeof(float));
        out.assign(per * n, -1.0f);
        RILL_RETURN_IF_ERROR(c.all_gather(own_block, writable(out), 3));
        RILL_RETURN_IF_ERROR(expect_each(out, per * n, gathered, "all_gather " + at));
        out.assign(rank == 0 ? per * n : 0, -1.0f);
        RILL_RETURN_IF_ERROR(c.gather(own_block, writable(out), 0, 4));
        if (rank == 0) RILL_RETURN_IF_ERROR(expect_each(out, per * n, gathered, "gather " + at));

        // scatter of rank 0's first per * n elements: block r to rank r.
        out.assign(per, -1.0f);
        const auto scattered = rank == 0 ? bytes(in).first(per * n * sizeof(float)) : std::span<const std::byte>();
        RILL_RETURN_IF_ERROR(c.scatter(scattered, writable(out), 0, 5));
        RILL_RETURN_IF_ERROR(
            expect_each(out, per, [&](size_t i) { return value(0, rank * per + i, salt); }, "scatter " + at));

        std::vector<size_t> send_counts, recv_counts;
        size_t sent = 0, received = 0;
        for (size_t j = 0; j < n; ++j) {
          send_counts.push_back(a2a_len(rank, j) * sizeof(float));
          recv_counts.push_back(a2a_len(j, rank) * sizeof(float));
          sent += a2a_len(rank, j);
          received += a2a_len(j, rank);
        }
        out.assign(received, -1.0f);
        RILL_RETURN_IF_ERROR(
            c.all_to_all_v(bytes(in).first(sent * sizeof(float)), send_counts, writable(out), recv_counts, 6));
        for (size_t j = 0, from = 0; j < n; from += a2a_len(j, rank), ++j) {
          const size_t start = a2a_start(j, rank);
          RILL_RETURN_IF_ERROR(expect_each(std::span<const float>(out).subspan(from, a2a_len(j, rank)),
                                           a2a_len(j, rank),
                                           [&](size_t i) { return value(static_cast<int>(j), start + i, salt); },
                                           fmt::format("all_to_all_v from rank {} {}", j, at)));
        }

        // One message of 64 MiB, rank 0 to the last rank.
        if (rank == 0) RILL_RETURN_IF_ERROR(c.send(root, bytes(in), 7));
        if (rank_index == root) {
          out.assign(count, -1.0f);
          RILL_RETURN_IF_ERROR(c.recv(0, writable(out), 7));
          RILL_RETURN_IF_ERROR(
              expect_each(out, count, [&](size_t i) { return value(0, i, salt); }, "send/recv " + at));
        }
        return Status::ok_status();
      });
      check_all_ok(statuses);
    }
  }
}
