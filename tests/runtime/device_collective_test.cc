// Device collectives (train.nccl) on cpu devices: each device a rank of its
// placement's communicator, the node's ranks meeting in the process, their
// sum crossing nodes by the host's collectives (runtime/node/
// local_collective.h). The plan NCCL runs, run where there is no GPU.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "compiler/compiler.h"
#include "runtime/node/local_collective.h"
#include "tests/runtime/numerics_reference.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

using testing::training_sample;

// Every step's loss of `job` on `nodes` x `devices` (in-process runtimes).
std::vector<double> losses(graph::Job job, int nodes, const std::string& devices, bool nccl) {
  job.train.nccl = nccl;
  auto cluster = compiler::parse_devices(devices, nodes);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(job, *cluster, {});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  const plan::Plan& p = *plan::GetPlan(plan->data());
  // Device collectives exactly when asked for: every P -> B of the job's
  // placement is one (the MLP's gradients, a GPT's tensor parallel sums).
  CHECK((p.comm_groups() != nullptr && p.comm_groups()->size() > 0) == nccl);
  // With 2-D SBP across nodes of several devices, conversions on one axis:
  // a communicator of one node's devices, and one of a device per node.
  const int per_node = cluster->devices_per_node;
  if (nccl && job.name.find("hybrid") != std::string::npos && nodes > 1 && per_node > 1) {
    bool node = false, lane = false;
    for (const plan::CommGroup* g : *p.comm_groups()) {
      const std::set<int> on(g->nodes()->begin(), g->nodes()->end());
      node = node || (on.size() == 1 && g->nodes()->size() > 1);
      lane = lane || (on.size() == g->nodes()->size() && static_cast<int>(on.size()) == nodes);
    }
    CHECK(node);
    CHECK(lane);
  }
  std::vector<double> out;
  std::mutex mu;
  testing::run_nodes(*plan, nodes, [&](RunOptions& options) {
    options.on_step = [&](const StepMetrics& m) {
      std::lock_guard lock(mu);
      for (size_t k = 0; k < m.names.size(); ++k)
        if (m.names[k] == "loss") out.push_back(m.values[k]);
    };
  });
  return out;
}

// Why bitwise: a device collective sums a node's pieces in rank order, the
// first two in one pass, then across nodes by the same collective on the
// same bytes (a bucket packed the same way; a reduce-scatter's node blocks)
// as a host boxing, and writes the sum to every device; a host boxing does
// those float operations in that order (on one node, P -> S then S -> B:
// each element's sum still in rank order). Gathers only move bytes. With 2-D
// SBP a node's devices sum in rank order as the node's boxing tasks do, and
// a lane's sum across 2 nodes is one addition either way (a host boxing
// sends every lane in one collective, a device collective each lane in its
// own: across more nodes the ring would add in other orders, below).
// All-to-alls only move bytes. The same float operations give the same
// bits on any CPU.
TEST_CASE("train.nccl on cpu devices: the same losses, bit for bit, as summing through the node's boxing tasks" *
          doctest::test_suite("blas_independent")) {
  struct Case {
    const char* sample;
    int nodes;
    const char* devices;
    int64_t bucket_bytes;
    int64_t micro_batches;
    bool zero = false;  // weights S(0): gathered (all-gather), their gradients reduce-scattered
  };
  for (const Case& c : {Case{"samples/mlp/mlp.json", 1, "cpu:2", 25 << 20, 1},
                        Case{"samples/mlp/mlp.json", 1, "cpu:3", 0, 2},
                        Case{"samples/mlp/mlp.json", 2, "cpu:2", 25 << 20, 1},
                        Case{"samples/mlp/mlp.json", 3, "cpu:1", 0, 1},
                        Case{"samples/mlp/mlp_hybrid.json", 2, "cpu:2", 25 << 20, 1},
                        Case{"samples/mlp/mlp_hybrid.json", 2, "cpu:3", 0, 1},
                        Case{"samples/gpt/gpt_moby_hybrid.json", 2, "cpu:2", 25 << 20, 1},
                        Case{"samples/mlp/mlp_pipeline.json", 2, "cpu:2", 0, 4},
                        Case{"samples/gpt/gpt_moby_tp.json", 1, "cpu:2", 25 << 20, 1},
                        Case{"samples/gpt/gpt_moby_tp.json", 2, "cpu:2", 25 << 20, 1},  // all-to-all across nodes
                        Case{"samples/mlp/mlp.json", 1, "cpu:2", 25 << 20, 1, true},
                        Case{"samples/mlp/mlp.json", 2, "cpu:2", 25 << 20, 2, true},
                        Case{"samples/mlp/mlp.json", 1, "cpu:3", 0, 1, true}}) {
    CAPTURE(c.sample);
    CAPTURE(c.nodes);
    CAPTURE(c.devices);
    CAPTURE(c.bucket_bytes);
    graph::Job job = training_sample(c.sample);
    job.train.steps = 3;
    job.train.log_every = 1;
    job.train.bucket_bytes = c.bucket_bytes;
    job.train.micro_batches = c.micro_batches;
    job.train.zero = c.zero;
    const std::vector<double> host = losses(job, c.nodes, c.devices, false);
    const std::vector<double> device = losses(job, c.nodes, c.devices, true);
    REQUIRE(host.size() == 3);
    CHECK(device == host);
  }
}

// Why within 1e-5: across 3 nodes the ring adds each element's three pieces
// in an order set by the block it falls in, and a host boxing packs every
// lane in one buffer where each lane's collective holds only its own, so
// some gradient elements are the same three floats added in another order:
// apart by a few ulp (2^-22 relative), which three steps at lr 0.03 leave
// orders of magnitude below 1e-5 of a loss near 2.3, on any CPU.
TEST_CASE("train.nccl with 2-D SBP on 3 nodes: each lane its own communicator, the losses of the boxing tasks") {
  graph::Job job = training_sample("samples/mlp/mlp_hybrid.json");
  job.train.steps = 3;
  job.train.log_every = 1;
  job.train.bucket_bytes = 0;
  const std::vector<double> host = losses(job, 3, "cpu:2", false);
  const std::vector<double> device = losses(job, 3, "cpu:2", true);
  REQUIRE(host.size() == 3);
  REQUIRE(device.size() == 3);
  for (size_t i = 0; i < host.size(); ++i) CHECK(device[i] == doctest::Approx(host[i]).epsilon(1e-5));
}

// Two ranks of one node whose calls run on threads of their own.
struct Pair {
  LocalCollective group{{0, 1}, 0, 2, nullptr, std::chrono::milliseconds(300)};
  std::vector<float> a{1, 2, 3}, b{10, 20, 30}, out_a{0, 0, 0}, out_b{0, 0, 0};
  Status call(int local, std::vector<float>& in, std::vector<float>& out, uint64_t tag,
              comm::ReduceOp op = comm::ReduceOp::kSum) {
    const void* inputs[] = {in.data()};
    void* outputs[] = {out.data()};
    const size_t elements[] = {in.size()};
    return group.rank(local)->all_reduce(inputs, outputs, elements, DType::kF32, op, tag);
  }
};

TEST_CASE("a node's ranks meet: the sum (or max) in every output, a rank left alone fails naming whom it waited for") {
  Pair p;
  auto other = std::async(std::launch::async, [&] { return p.call(1, p.b, p.out_b, 7); });
  REQUIRE(p.call(0, p.a, p.out_a, 7).ok());
  REQUIRE(other.get().ok());
  CHECK(p.out_a == std::vector<float>{11, 22, 33});
  CHECK(p.out_b == p.out_a);
  other = std::async(std::launch::async, [&] { return p.call(1, p.b, p.b, 8, comm::ReduceOp::kMax); });
  REQUIRE(p.call(0, p.a, p.a, 8, comm::ReduceOp::kMax).ok());  // in place
  REQUIRE(other.get().ok());
  CHECK(p.a == std::vector<float>{10, 20, 30});
  CHECK(p.b == p.a);
  CHECK(std::string(p.group.rank(1)->backend()) == "host");
  CHECK(p.group.rank(1)->rank() == 1);
  CHECK(p.group.rank(1)->world() == 2);

  // Rank 1 never comes: rank 0 fails at its deadline, naming device 1, and
  // a late rank 1 fails alike instead of summing with buffers left behind.
  Status alone = p.call(0, p.a, p.out_a, 9);
  CHECK(alone.code() == Code::kDeadlineExceeded);
  CHECK(alone.message().find("device 0 waited 300 ms in collective tag 9 for device(s) 1") != std::string::npos);
  CHECK(p.group.arrived() == 0);
  CHECK(p.call(1, p.b, p.out_b, 9).code() == Code::kDeadlineExceeded);
}

TEST_CASE("a node's ranks meet: a reduce-scatter gives each its block of the sum, an all-gather every block") {
  Pair p;
  std::vector<float> mine(2), theirs(1);
  // Three elements over two ranks: blocks of two and one (as pieces split).
  const size_t uneven[] = {2, 1};
  auto other = std::async(std::launch::async, [&] {
    return p.group.rank(1)->reduce_scatter(p.b.data(), theirs.data(), uneven, DType::kF32, comm::ReduceOp::kSum, 3);
  });
  REQUIRE(p.group.rank(0)->reduce_scatter(p.a.data(), mine.data(), uneven, DType::kF32, comm::ReduceOp::kSum, 3).ok());
  REQUIRE(other.get().ok());
  CHECK(mine == std::vector<float>{11, 22});
  CHECK(theirs == std::vector<float>{33});
  std::vector<float> all_a(4), all_b(4);
  const std::vector<float> block_a{1, 2}, block_b{3, 4};
  const size_t even[] = {2, 2};
  other = std::async(std::launch::async,
                     [&] { return p.group.rank(1)->all_gather(block_b.data(), all_b.data(), even, DType::kF32, 4); });
  REQUIRE(p.group.rank(0)->all_gather(block_a.data(), all_a.data(), even, DType::kF32, 4).ok());
  REQUIRE(other.get().ok());
  CHECK(all_a == std::vector<float>{1, 2, 3, 4});
  CHECK(all_b == all_a);
  std::vector<float> three_a(3), three_b(3);
  other = std::async(std::launch::async,
                     [&] { return p.group.rank(1)->all_gather(block_b.data(), three_b.data(), uneven, DType::kF32, 5); });
  REQUIRE(p.group.rank(0)->all_gather(block_a.data(), three_a.data(), uneven, DType::kF32, 5).ok());
  REQUIRE(other.get().ok());
  CHECK(three_a == std::vector<float>{1, 2, 3});
  CHECK(three_b == three_a);
  // Ranks that disagree on the blocks fail alike; so does a call with too few.
  other = std::async(std::launch::async,
                     [&] { return p.group.rank(1)->all_gather(block_b.data(), all_b.data(), even, DType::kF32, 6); });
  CHECK(p.group.rank(0)->all_gather(block_a.data(), three_a.data(), uneven, DType::kF32, 6).code() == Code::kInternal);
  CHECK(other.get().code() == Code::kInternal);
  CHECK(p.group.rank(0)->all_gather(block_a.data(), three_a.data(), std::span<const size_t>(even, 1), DType::kF32, 7)
            .code() == Code::kInternal);
}

// One act of rank `rank`'s body over `in` into `out` (shapes as given).
Status act_on(DeviceCollectiveBody& body, std::vector<float>& in, const Shape& in_shape, std::vector<float>& out,
              const Shape& out_shape) {
  const TensorView input{in.data(), in_shape, DType::kF32}, output{out.data(), out_shape, DType::kF32};
  const TensorView* inputs[] = {&input};
  const TensorView* outputs[] = {&output};
  return body.act(ActIo{0, inputs, outputs});
}

// A [2, 5] tensor split by columns over 2 ranks (3 and 2, as pieces split):
// each rank's piece holds its columns of both rows, not one stretch of the
// tensor, so the body packs the blocks before a reduce-scatter and unpacks
// them after an all-gather. Element by element against the logical tensor
// (small integers: every sum exact).
TEST_CASE("a device collective along columns: reduce-scatter and all-gather, element by element") {
  LocalCollective group{{0, 1}, 0, 2, nullptr, std::chrono::milliseconds(2000)};
  const TensorMeta whole{Shape{2, 5}, DType::kF32};
  const AxisBlocks columns{{2 * 3, 2 * 2}, /*outer=*/2, /*slice=*/1};  // elements: outer 2 x slices x slice 1
  auto body = [&](int rank, CollectiveCall call) {
    return DeviceCollectiveBody(group.rank(rank), call, {whole}, columns, {}, comm::ReduceOp::kSum, 11,
                                fmt::format("cols@{}", rank));
  };
  // Reduce-scatter: rank r holds r + 1 times the tensor [[0..4], [5..9]].
  std::vector<float> a(10), b(10);
  for (int i = 0; i < 10; ++i) a[i] = static_cast<float>(i), b[i] = 2.0f * static_cast<float>(i);
  std::vector<float> block0(6), block1(4);
  DeviceCollectiveBody rs0 = body(0, CollectiveCall::kReduceScatter), rs1 = body(1, CollectiveCall::kReduceScatter);
  auto other = std::async(std::launch::async, [&] { return act_on(rs1, b, {2, 5}, block1, {2, 2}); });
  REQUIRE(act_on(rs0, a, {2, 5}, block0, {2, 3}).ok());
  REQUIRE(other.get().ok());
  CHECK(block0 == std::vector<float>{0, 3, 6, 15, 18, 21});  // columns 0-2 of 3x the tensor
  CHECK(block1 == std::vector<float>{9, 12, 24, 27});        // columns 3-4
  // All-gather: the blocks back into the whole, on both.
  std::vector<float> all0(10), all1(10);
  DeviceCollectiveBody ag0 = body(0, CollectiveCall::kAllGather), ag1 = body(1, CollectiveCall::kAllGather);
  other = std::async(std::launch::async, [&] { return act_on(ag1, block1, {2, 2}, all1, {2, 5}); });
  REQUIRE(act_on(ag0, block0, {2, 3}, all0, {2, 5}).ok());
  REQUIRE(other.get().ok());
  std::vector<float> want(10);
  for (int i = 0; i < 10; ++i) want[i] = 3.0f * static_cast<float>(i);
  CHECK(all0 == want);
  CHECK(all1 == want);
}

// All-to-all of a [4, 5] tensor (values 0..19) over 2 ranks, rows to
// columns (S(0) -> S(1), columns 3 and 2 as pieces split) and back: the
// blocks sent are columns of the rows a rank holds (packed), the blocks
// received rows of its columns; back, the other way round. Copies only:
// every element exactly the logical tensor's.
TEST_CASE("a device all-to-all: rows to columns and back, element by element") {
  LocalCollective group{{0, 1}, 0, 2, nullptr, std::chrono::milliseconds(2000)};
  const TensorMeta whole{Shape{4, 5}, DType::kF32};
  auto body = [&](int rank, AxisBlocks sent, AxisBlocks received) {
    return DeviceCollectiveBody(group.rank(rank), CollectiveCall::kAllToAll, {whole}, std::move(sent),
                                std::move(received), comm::ReduceOp::kSum, 12, fmt::format("a2a@{}", rank));
  };
  std::vector<float> logical(20);
  for (int i = 0; i < 20; ++i) logical[i] = static_cast<float>(i);
  auto piece = [&](int row0, int rows, int col0, int cols) {
    std::vector<float> out;
    for (int r = row0; r < row0 + rows; ++r)
      for (int c = col0; c < col0 + cols; ++c) out.push_back(logical[static_cast<size_t>(r * 5 + c)]);
    return out;
  };
  std::vector<float> rows0 = piece(0, 2, 0, 5), rows1 = piece(2, 2, 0, 5);
  std::vector<float> cols0(12, -1.0f), cols1(8, -1.0f);
  // Rows [2, 5] cut into columns 3 + 2 (outer 2); columns received as rows 2 + 2.
  DeviceCollectiveBody to_cols0 = body(0, {{2 * 3, 2 * 2}, 2, 1}, {{2 * 3, 2 * 3}, 1, 3}),
                       to_cols1 = body(1, {{2 * 3, 2 * 2}, 2, 1}, {{2 * 2, 2 * 2}, 1, 2});
  auto other = std::async(std::launch::async, [&] { return act_on(to_cols1, rows1, {2, 5}, cols1, {4, 2}); });
  REQUIRE(act_on(to_cols0, rows0, {2, 5}, cols0, {4, 3}).ok());
  REQUIRE(other.get().ok());
  CHECK(cols0 == piece(0, 4, 0, 3));
  CHECK(cols1 == piece(0, 4, 3, 2));
  // Back: columns cut into rows 2 + 2 (contiguous); rows received as columns 3 + 2 (outer 2).
  std::vector<float> back0(10, -1.0f), back1(10, -1.0f);
  DeviceCollectiveBody to_rows0 = body(0, {{2 * 3, 2 * 3}, 1, 3}, {{2 * 3, 2 * 2}, 2, 1}),
                       to_rows1 = body(1, {{2 * 2, 2 * 2}, 1, 2}, {{2 * 3, 2 * 2}, 2, 1});
  other = std::async(std::launch::async, [&] { return act_on(to_rows1, cols1, {4, 2}, back1, {2, 5}); });
  REQUIRE(act_on(to_rows0, cols0, {4, 3}, back0, {2, 5}).ok());
  REQUIRE(other.get().ok());
  CHECK(back0 == rows0);
  CHECK(back1 == rows1);
  // Blocks that do not pair up (rank 0 sends rank 1 six elements, which
  // expects four) fail on both ranks.
  DeviceCollectiveBody bad0 = body(0, {{2 * 3, 2 * 3}, 1, 3}, {{2 * 3, 2 * 2}, 2, 1}),
                       bad1 = body(1, {{2 * 2, 2 * 2}, 1, 2}, {{2 * 2, 2 * 2}, 2, 1});
  other = std::async(std::launch::async, [&] { return act_on(bad1, cols1, {4, 2}, back1, {2, 5}); });
  CHECK(act_on(bad0, cols0, {4, 3}, back0, {2, 5}).code() == Code::kInternal);
  CHECK(other.get().code() == Code::kInternal);
}

TEST_CASE("a node's ranks meet: disagreeing calls fail on both, and cancel wakes a waiting rank") {
  Pair p;
  auto other = std::async(std::launch::async, [&] { return p.call(1, p.b, p.out_b, 5); });
  const Status mine = p.call(0, p.a, p.out_a, 6);
  const Status theirs = other.get();
  CHECK(mine.code() == Code::kInternal);
  CHECK(theirs.code() == Code::kInternal);
  CHECK(mine.message().find("disagree") != std::string::npos);

  Pair q;
  auto waiting = std::async(std::launch::async, [&] { return q.call(0, q.a, q.out_a, 1); });
  while (q.group.arrived() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // in, waiting
  q.group.cancel("the run was stopped: node 1 is gone");
  const Status woken = waiting.get();
  CHECK(woken.code() == Code::kAborted);
  CHECK(woken.message().find("node 1 is gone") != std::string::npos);
  CHECK(q.group.arrived() == 0);
  CHECK(q.call(1, q.b, q.out_b, 1).code() == Code::kAborted);  // and later calls fail with it
}

}  // namespace
}  // namespace rill
