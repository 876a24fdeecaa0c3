// NCCL on the GPU: a communicator of one rank (the GPU machine has one GPU,
// and NCCL refuses two ranks on one), and jobs whose device collectives
// (train.nccl) have ranks sharing the GPU, staged through the host. Without
// a GPU the suite reports itself skipped (exit 77).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "actor/own_piece_body.h"
#include "base/half.h"
#include "compiler/compiler.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/nccl_comm.h"
#include "runtime/node/node_runtime.h"
#include "tests/runtime/numerics_reference.h"
#include "tests/runtime/sample_jobs.h"

namespace rill {
namespace {

constexpr std::chrono::milliseconds kTimeout{20000};

// `values` on the device, through `call(input, output)` (an output of the
// same size, or the input itself), back on the host.
template <typename T, typename Call>
std::vector<T> on_device(CudaContext& cuda, const std::vector<T>& values, bool in_place, Call&& call) {
  const size_t bytes = values.size() * sizeof(T);
  auto in = cuda.allocate(bytes, "test input");
  auto out = cuda.allocate(bytes, "test output");
  REQUIRE(in.ok());
  REQUIRE(out.ok());
  REQUIRE(cuda.copy(*in, values.data(), bytes, CopyKind::kHostToDevice, "test").ok());
  void* output = in_place ? *in : *out;
  Status status = call(*in, output);
  REQUIRE_MESSAGE(status.ok(), status.to_string());
  std::vector<T> back(values.size());
  REQUIRE(cuda.copy(back.data(), output, bytes, CopyKind::kDeviceToHost, "test").ok());
  REQUIRE(cuda.synchronize("test").ok());
  cuda.release(*in);
  cuda.release(*out);
  return back;
}

// `values` all-reduced alone (world 1) by `op`.
template <typename T>
std::vector<T> all_reduce_alone(NcclComm& comm, CudaContext& cuda, const std::vector<T>& values, DType dtype, int op,
                                bool in_place) {
  return on_device(cuda, values, in_place, [&](void* in, void* out) {
    const void* inputs[] = {in};
    void* outputs[] = {out};
    const size_t elements[] = {values.size()};
    return comm.all_reduce(inputs, outputs, elements, dtype, op, cuda, kTimeout, "test");
  });
}

TEST_CASE("NCCL with one rank on cuda:0: every dtype and reduction gives its input back; an aborted one refuses") {
  auto cuda = CudaContext::create(0);
  REQUIRE_MESSAGE(cuda.ok(), cuda.status().to_string());
  auto id = nccl_unique_id();
  if (!id.ok() && id.status().code() == Code::kUnavailable) {
    MESSAGE("skipped: " << id.status().to_string());  // a module built without NCCL
    return;
  }
  REQUIRE_MESSAGE(id.ok(), id.status().to_string());
  const int ranks[] = {0}, devices[] = {0};
  auto comms = nccl_init(*id, 1, ranks, devices, kTimeout);
  REQUIRE_MESSAGE(comms.ok(), comms.status().to_string());
  REQUIRE(comms->size() == 1);
  NcclComm& comm = *(*comms)[0];
  CHECK(comm.rank() == 0);
  CHECK(comm.world() == 1);
  const std::vector<float> f32{1.5f, -2.0f, 3.25f, 1e-30f};
  for (int op = 0; op < 4; ++op) {
    CAPTURE(op);
    CHECK(all_reduce_alone(comm, **cuda, f32, DType::kF32, op, false) == f32);
    CHECK(all_reduce_alone(comm, **cuda, f32, DType::kF32, op, true) == f32);
  }
  const std::vector<int32_t> i32{7, -3, 1 << 30};
  CHECK(all_reduce_alone(comm, **cuda, i32, DType::kI32, 3, false) == i32);
  std::vector<BFloat16> bf16;
  for (float v : f32) bf16.push_back(BFloat16::from_float(v));
  const std::vector<BFloat16> bf16_back = all_reduce_alone(comm, **cuda, bf16, DType::kBF16, 0, false);
  CHECK(std::memcmp(bf16_back.data(), bf16.data(), bf16.size() * sizeof(BFloat16)) == 0);
  // One rank's block is the whole: a reduce-scatter, an all-gather and an
  // all-to-all of it give it back too.
  CHECK(on_device(**cuda, f32, false, [&](void* in, void* out) {
          const size_t counts[] = {f32.size()};
          return comm.reduce_scatter(in, out, counts, DType::kF32, 0, **cuda, kTimeout, "test");
        }) == f32);
  CHECK(on_device(**cuda, i32, false, [&](void* in, void* out) {
          const size_t counts[] = {i32.size()};
          return comm.all_gather(in, out, counts, DType::kI32, **cuda, kTimeout, "test");
        }) == i32);
  CHECK(on_device(**cuda, f32, false, [&](void* in, void* out) {
          const size_t counts[] = {f32.size()};
          return comm.all_to_all(in, counts, out, counts, DType::kF32, **cuda, kTimeout, "test");
        }) == f32);
  // So do an average, a reduce and a broadcast to and from rank 0.
  CHECK(all_reduce_alone(comm, **cuda, f32, DType::kF32, 4, false) == f32);
  CHECK(on_device(**cuda, f32, false, [&](void* in, void* out) {
          return comm.reduce(in, out, f32.size(), DType::kF32, 0, 0, **cuda, kTimeout, "test");
        }) == f32);
  CHECK(on_device(**cuda, f32, true, [&](void* in, void* out) {
          return comm.broadcast(in, out, f32.size(), DType::kF32, 0, **cuda, kTimeout, "test");
        }) == f32);
  CHECK(comm.broadcast(nullptr, nullptr, 1, DType::kF32, 1, **cuda, kTimeout, "test").code() ==
        Code::kInvalidArgument);  // no rank 1
  CHECK(comm.check("test").ok());
  CHECK(comm.all_reduce({}, {}, {}, DType::kF32, 9, **cuda, kTimeout, "test").code() == Code::kInvalidArgument);

  comm.abort();
  const void* inputs[] = {nullptr};
  void* outputs[] = {nullptr};
  const size_t elements[] = {1};
  const Status aborted = comm.all_reduce(inputs, outputs, elements, DType::kF32, 0, **cuda, kTimeout, "test");
  CHECK(aborted.code() == Code::kAborted);
}

// Every step's loss of `sample` on `nodes` agents sharing cuda:0
// (in-process runtimes over in-process transports).
std::vector<double> shared_gpu_losses(int nodes, bool nccl, bool zero, const char* sample = "samples/mlp/mlp.json") {
  graph::Job job = testing::training_sample(sample);
  job.train.nccl = nccl;
  job.train.zero = zero;
  job.train.steps = 5;
  job.train.log_every = 1;
  auto cluster = compiler::parse_devices("cuda:1", nodes);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(job, *cluster, {});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  CHECK((plan::GetPlan(plan->data())->comm_groups() != nullptr) == nccl);
  std::vector<double> losses;
  std::mutex mu;
  const std::vector<RunReport> reports = testing::run_nodes(*plan, nodes, [&](RunOptions& options) {
    options.trace = true;
    options.on_step = [&](const StepMetrics& m) {
      std::lock_guard lock(mu);
      for (size_t k = 0; k < m.names.size(); ++k)
        if (m.names[k] == "loss") losses.push_back(m.values[k]);
    };
  });
  // The device collectives worked in the GPU's memory (their trace says how).
  int shared = 0;
  for (const RunReport& report : reports)
    for (const auto& trace : report.traces) shared += trace.collective.ends_with(" shared") ? 1 : 0;
  CHECK((shared > 0) == nccl);
  return losses;
}

// Agents sharing the one GPU: NCCL would refuse their ranks ("Duplicate
// GPU"), so the communicator's ranks, all on that GPU, combine each other's
// pieces in its memory (runtime/node/shared_gpu_rank.h; in one process by
// pointer, between agents by CUDA IPC). 2 agents: bitwise the boxing tasks'
// losses (each element the sum of two pieces, one addition either way; a
// reduce-scatter's and gather's blocks likewise, with train.zero). 3: the
// shared path adds in rank order where the host's ring adds each block's
// three pieces in an order set by the block, so some gradient elements
// differ by a few ulp (2^-22 relative); five steps leave the losses orders
// of magnitude inside 1e-5.
TEST_CASE("train.nccl on 2 and 3 agents sharing cuda:0: in the GPU's memory, the boxing tasks' losses") {
  for (const bool zero : {false, true})
    for (int nodes : {2, 3}) {
      CAPTURE(zero);
      CAPTURE(nodes);
      const std::vector<double> host = shared_gpu_losses(nodes, false, zero);
      const std::vector<double> shared = shared_gpu_losses(nodes, true, zero);
      REQUIRE(host.size() == 5);
      REQUIRE(shared.size() == 5);
      if (nodes == 2) {
        CHECK(shared == host);
      } else {
        for (size_t i = 0; i < host.size(); ++i) CHECK(shared[i] == doctest::Approx(host[i]).epsilon(1e-5));
      }
    }
}

// GPT tensor parallel on 2 agents sharing the GPU: its all-to-alls (heads
// to rows and back), its slices and zeros (each device's own piece) and
// its sums all in the GPU's memory; the boxing tasks' losses bit for bit
// (copies, and sums of two pieces: one addition either way).
TEST_CASE("train.nccl, GPT tensor parallel on 2 agents sharing cuda:0: all-to-all and own pieces in its memory") {
  const std::vector<double> host = shared_gpu_losses(2, false, false, "samples/gpt/gpt_moby_tp.json");
  const std::vector<double> shared = shared_gpu_losses(2, true, false, "samples/gpt/gpt_moby_tp.json");
  REQUIRE(host.size() == 5);
  CHECK(shared == host);
}

// A device's own piece in its memory (cudaMemcpy2DAsync, cudaMemsetAsync):
// columns 3-4 of a [2, 5] tensor sliced out, then put back among zeros.
TEST_CASE("a device's own piece on cuda:0: B -> S(1) and S(1) -> P, element by element") {
  auto cuda = CudaContext::create(0);
  REQUIRE_MESSAGE(cuda.ok(), cuda.status().to_string());
  const Region whole{{0, 0}, {2, 5}}, cols{{0, 3}, {2, 2}};
  const std::vector<float> logical{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto a = (*cuda)->allocate(10 * sizeof(float), "test");
  auto b = (*cuda)->allocate(4 * sizeof(float), "test");
  auto c = (*cuda)->allocate(10 * sizeof(float), "test");
  REQUIRE((a.ok() && b.ok() && c.ok()));
  REQUIRE((*cuda)->copy(*a, logical.data(), 10 * sizeof(float), CopyKind::kHostToDevice, "test").ok());
  auto act = [&](OwnPieceBody& body, void* in, const Shape& in_shape, void* out, const Shape& out_shape) {
    const TensorView input{in, in_shape, DType::kF32}, output{out, out_shape, DType::kF32};
    const TensorView* inputs[] = {&input};
    const TensorView* outputs[] = {&output};
    return body.act(ActIo{0, inputs, outputs});
  };
  OwnPieceBody slice(cuda->get(), whole, cols, false, true, DType::kF32, "slice");
  OwnPieceBody spread(cuda->get(), cols, whole, true, true, DType::kF32, "spread");
  REQUIRE(act(slice, *a, {2, 5}, *b, {2, 2}).ok());
  REQUIRE(act(spread, *b, {2, 2}, *c, {2, 5}).ok());
  std::vector<float> sliced(4), spread_out(10);
  REQUIRE((*cuda)->copy(sliced.data(), *b, 4 * sizeof(float), CopyKind::kDeviceToHost, "test").ok());
  REQUIRE((*cuda)->copy(spread_out.data(), *c, 10 * sizeof(float), CopyKind::kDeviceToHost, "test").ok());
  REQUIRE((*cuda)->synchronize("test").ok());
  CHECK(sliced == std::vector<float>{3, 4, 8, 9});
  CHECK(spread_out == std::vector<float>{0, 0, 0, 3, 4, 0, 0, 0, 8, 9});
  for (void* p : {*a, *b, *c}) (*cuda)->release(p);
}

}  // namespace
}  // namespace rill

int main(int argc, char** argv) {
  if (rill::cuda_device_count() == 0) {
    std::printf("skipped: no CUDA device here (NCCL is tested where a GPU is present)\n");
    return 77;  // meson's "skipped"
  }

  doctest::Context context(argc, argv);
  return context.run();
}
