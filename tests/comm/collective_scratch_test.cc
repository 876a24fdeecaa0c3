// Collectives given their scratch (use_scratch): each call that boxing makes,
// given exactly what base/collective_scratch.h says it needs, runs
// correctly and allocates no scratch of its own, also when every message
// arrives in two pieces; one byte less is an error naming the need, never a
// write past the span. Inputs are small integers, so float sums are exact
// and results compare exactly.
#include <cstring>

#include "comm/collectives.h"
#include "tests/comm/comm_test_util.h"

using namespace rill;
using namespace rill::comm;
using namespace rill::comm::testing;

namespace {

// Hands every received message over as two pieces: its first 19 bytes
// (the 16-byte chunk header and 3 bytes of data), then the rest, as a
// transport holding header and body apart may.
class SplittingTransport final : public Transport {
 public:
  explicit SplittingTransport(Transport& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int world() const override { return inner_.world(); }
  Status send(int to, uint64_t tag, std::span<const std::byte> header, std::span<const std::byte> body = {},
              SendTracker* tracker = nullptr) override {
    return inner_.send(to, tag, header, body, tracker);
  }
  Status recv_message(int from, uint64_t tag, Clock::time_point deadline, Received* out) override {
    auto holder = std::make_unique<Joined>();
    RILL_RETURN_IF_ERROR(inner_.recv_message(from, tag, deadline, &holder->inner));
    holder->bytes.resize(holder->inner.size());
    holder->inner.view().copy_to(holder->bytes.data());
    const std::span<const std::byte> all(holder->bytes);
    const size_t cut = std::min<size_t>(19, all.size());
    MessageView view{all.first(cut), all.subspan(cut), holder->inner.view().sealed};
    *out = Received(std::move(holder), view);
    return {};
  }
  void set_handler(uint64_t, Handler) override {}
  void accept_tags(uint64_t, uint64_t) override {}
  void cancel_tags(uint64_t lo, uint64_t hi, const std::string& reason) override { inner_.cancel_tags(lo, hi, reason); }
  int64_t received_dropped() const override { return inner_.received_dropped(); }
  bool peer_lost(int rank) const override { return inner_.peer_lost(rank); }
  bool seals(int peer) const override { return inner_.seals(peer); }
  void close() override {}

 private:
  struct Joined : Received::Holder {
    Received inner;
    std::vector<std::byte> bytes;
  };
  Transport& inner_;
};

float value(int rank, size_t i) { return static_cast<float>(static_cast<int>((rank * 7 + i * 13) % 17) - 8); }

std::vector<float> input(int rank, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = value(rank, i);
  return v;
}

std::vector<float> sum(int world, size_t count) {
  std::vector<float> s(count, 0.0f);
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < count; ++i) s[i] += value(r, i);
  return s;
}

std::span<std::byte> bytes(std::vector<float>& v) { return std::as_writable_bytes(std::span<float>(v)); }

// Runs `call` on every rank with exactly `need(rank)` bytes of scratch plus
// `slack` (which may be negative), over transports that split every
// message or not.
std::vector<Status> run_given(int world, bool split, std::function<size_t(int)> need, long slack,
                              std::function<Status(Collectives&, int)> call) {
  auto transports = make_inproc_transports(world);
  return run_ranks(world, [&](int rank) -> Status {
    SplittingTransport splitting(*transports[static_cast<size_t>(rank)]);
    Collectives collectives(split ? static_cast<Transport&>(splitting) : *transports[static_cast<size_t>(rank)]);
    const size_t given = static_cast<size_t>(static_cast<long>(need(rank)) + slack);
    std::vector<std::byte> scratch(given + 64);  // a guard after the span, checked untouched
    std::memset(scratch.data(), 0x5a, scratch.size());
    collectives.use_scratch({scratch.data(), given});
    Status status = call(collectives, rank);
    for (size_t i = given; i < scratch.size(); ++i)
      if (scratch[i] != std::byte{0x5a}) return internal_error("rank {}: byte {} past the scratch written", rank, i);
    // Without split messages it holds no buffer but the given one.
    if (status.ok() && !split && collectives.scratch_bytes() != given)
      return internal_error("rank {}: {} bytes of scratch, {} given", rank, collectives.scratch_bytes(), given);
    return status;
  });
}

Status expect_equal(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  if (got != want) return internal_error("{}: result differs from the reference", what);
  return {};
}

}  // namespace

TEST_CASE("collectives given exactly their scratch run correctly and allocate none") {
  for (bool split : {false, true})
  for (int world : {2, 3}) {
    // Direct in place (small), ring in place (past direct_bytes, and past a
    // chunk), reduce-scatter, all-gather and all-to-all of uneven blocks.
    for (size_t count : {size_t{1001}, size_t{20000}, size_t{300001}}) {
      CAPTURE(split);
      CAPTURE(world);
      CAPTURE(count);
      const size_t in_bytes = count * sizeof(float);
      auto need_all_reduce = [&](int) {
        return collective_scratch_bytes(CollectiveCall::kAllReduce, in_bytes, true, world);
      };
      check_all_ok(run_given(world, split, need_all_reduce, 0, [&](Collectives& c, int rank) -> Status {
        auto v = input(rank, count);
        for (int i = 0; i < 2; ++i) {  // twice: the second call reuses the same bytes
          v = input(rank, count);
          RILL_RETURN_IF_ERROR(c.all_reduce(v, v, 1));
          RILL_RETURN_IF_ERROR(expect_equal(v, sum(world, count), "all_reduce in place"));
        }
        return {};
      }));
      std::vector<size_t> counts(static_cast<size_t>(world));
      for (int j = 0; j < world; ++j) counts[static_cast<size_t>(j)] = count / static_cast<size_t>(world) + (j == 0 ? count % static_cast<size_t>(world) : 0);
      auto need_scatter = [&](int rank) {
        (void)rank;
        return collective_scratch_bytes(CollectiveCall::kReduceScatter, in_bytes, false, world);
      };
      check_all_ok(run_given(world, split, need_scatter, 0, [&](Collectives& c, int rank) -> Status {
        auto in = input(rank, count);
        std::vector<float> out(counts[static_cast<size_t>(rank)]);
        RILL_RETURN_IF_ERROR(c.reduce_scatter_v(in, out, counts, 2));
        size_t begin = 0;
        for (int j = 0; j < rank; ++j) begin += counts[static_cast<size_t>(j)];
        const auto whole = sum(world, count);
        return expect_equal(out, std::vector<float>(whole.begin() + static_cast<long>(begin),
                                                   whole.begin() + static_cast<long>(begin + out.size())),
                            "reduce_scatter_v");
      }));
      std::vector<size_t> byte_counts;
      for (size_t n : counts) byte_counts.push_back(n * sizeof(float));
      auto need_gather = [&](int rank) {
        return collective_scratch_bytes(CollectiveCall::kAllGather, byte_counts[static_cast<size_t>(rank)], false, world);
      };
      check_all_ok(run_given(world, split, need_gather, 0, [&](Collectives& c, int rank) -> Status {
        const auto whole = input(0, count);
        size_t begin = 0;
        for (int j = 0; j < rank; ++j) begin += counts[static_cast<size_t>(j)];
        std::vector<float> mine(whole.begin() + static_cast<long>(begin),
                                whole.begin() + static_cast<long>(begin + counts[static_cast<size_t>(rank)]));
        std::vector<float> out(count);
        RILL_RETURN_IF_ERROR(c.all_gather_v(bytes(mine), bytes(out), byte_counts, 3));
        return expect_equal(out, whole, "all_gather_v");
      }));
      auto need_all_to_all = [&](int) {
        return collective_scratch_bytes(CollectiveCall::kAllToAll, in_bytes, false, world);
      };
      check_all_ok(run_given(world, split, need_all_to_all, 0, [&](Collectives& c, int rank) -> Status {
        // Rank r sends rank j block j of its input; every block is the
        // same size, so what arrives is block `rank` of each sender's.
        const size_t block = count / static_cast<size_t>(world);
        auto in = input(rank, block * static_cast<size_t>(world));
        std::vector<float> out(in.size());
        std::vector<size_t> each(static_cast<size_t>(world), block * sizeof(float));
        RILL_RETURN_IF_ERROR(c.all_to_all_v(bytes(in), each, bytes(out), each, 4));
        for (int from = 0; from < world; ++from)
          for (size_t i = 0; i < block; ++i)
            if (out[static_cast<size_t>(from) * block + i] != value(from, static_cast<size_t>(rank) * block + i))
              return internal_error("all_to_all_v: element {} from rank {}", i, from);
        return {};
      }));
    }
  }
}

TEST_CASE("collectives given less scratch than they need fail naming it, writing nothing past it") {
  const int world = 3;
  // A direct all-reduce in place keeps its input; a reduce-scatter the
  // whole input's partial sums. One byte short of either fails on every
  // rank before anything is sent.
  const size_t count = 1001;
  const size_t in_bytes = count * sizeof(float);
  auto all_reduce = run_given(
      world, false, [&](int) { return collective_scratch_bytes(CollectiveCall::kAllReduce, in_bytes, true, world); }, -1,
      [&](Collectives& c, int rank) -> Status {
        auto v = input(rank, count);
        return c.all_reduce(v, v, 1);
      });
  auto reduce_scatter = run_given(
      world, false, [&](int) { return collective_scratch_bytes(CollectiveCall::kReduceScatter, in_bytes, false, world); },
      -1, [&](Collectives& c, int rank) -> Status {
        auto in = input(rank, count);
        std::vector<float> out(block_range(count, world, rank).size);
        return c.reduce_scatter(in, out, 2);
      });
  for (const auto* statuses : {&all_reduce, &reduce_scatter})
    for (const Status& s : *statuses) {
      CHECK(s.code() == Code::kInternal);
      CHECK(s.message().find(fmt::format("needs {} bytes of scratch, {} given", in_bytes, in_bytes - 1)) !=
            std::string::npos);
    }
}
