// Graphs of acts (ComputeBody on a GPU, actor/compute_body.cc), checked on
// any machine against a recording CudaContext: which acts launch the kernel
// directly, which capture it, which replay what was captured. The GPU side
// (the same bits with graphs on and off) is tests/runtime/cuda_runtime_test.cc.
#include <doctest/doctest.h>

#include <array>
#include <vector>

#include "actor/body.h"
#include "kernels/cuda/cuda_context.h"

namespace rill {
namespace {

// What the body asked of its context. capture() runs the work it is given
// (as stream capture records it) and hands out graph k as the pointer k + 1.
class RecordingContext final : public CudaContext {
 public:
  int captures = 0, replays = 0, destroyed = 0;
  std::vector<int> replayed;  // graph numbers, in order
  Status capture_result;      // an error to fail the next captures with

  int device() const override { return 0; }
  void* stream() const override { return nullptr; }
  void* cublas() const override { return nullptr; }
  int64_t* bad_label() const override { return nullptr; }
  double* reduction_partials() const override { return nullptr; }
  Status activate(const char*) override { return {}; }
  Status synchronize(const char*) override { return {}; }
  StatusOr<void*> allocate(size_t, const char*) override { return internal_error("not here"); }
  Status memory_info(size_t*, size_t*, const char*) override { return internal_error("not here"); }
  StatusOr<std::array<uint8_t, 16>> uuid(const char*) override { return internal_error("not here"); }
  void release(void*) override {}
  StatusOr<void*> allocate_host(size_t, const char*) override { return internal_error("not here"); }
  void release_host(void*) override {}
  Status copy(void*, const void*, size_t, CopyKind, const char*) override { return internal_error("not here"); }
  Status copy_rows(void*, size_t, const void*, size_t, size_t, size_t, CopyKind, const char*) override {
    return internal_error("not here");
  }
  Status zero(void*, size_t, const char*) override { return internal_error("not here"); }
  Status copy_beside(void*, const void*, size_t, CopyKind, void*, const char*) override {
    return internal_error("not here");
  }
  Status copy_peer(void*, const void*, int, size_t, void*, const char*) override { return internal_error("not here"); }
  StatusOr<void*> create_event(const char*) override { return internal_error("not here"); }
  void destroy_event(void*) override {}
  Status mark(void*, const char*) override { return internal_error("not here"); }
  StatusOr<uint64_t> record(const char*) override { return internal_error("not here"); }
  StatusOr<bool> done(uint64_t, const char*) override { return internal_error("not here"); }
  StatusOr<void*> capture(const std::function<Status()>& enqueue, const char*) override {
    RILL_RETURN_IF_ERROR(enqueue());
    RILL_RETURN_IF_ERROR(capture_result);
    return reinterpret_cast<void*>(static_cast<uintptr_t>(++captures));
  }
  Status replay(void* graph, const char*) override {
    ++replays;
    replayed.push_back(static_cast<int>(reinterpret_cast<uintptr_t>(graph)));
    return {};
  }
  void destroy_graph(void*) override { ++destroyed; }
};

int g_launches = 0;  // the kernel's own calls: direct launches and the work captures record
Status counting_kernel(KernelContext&) {
  ++g_launches;
  return {};
}

// Two slots of one input and one output, as a regst of register_num 2 has.
struct Slots {
  std::array<float, 4> in0{}, in1{}, out0{}, out1{};
  std::array<TensorView, 4> views{TensorView{in0.data(), {4}, DType::kF32}, TensorView{in1.data(), {4}, DType::kF32},
                                  TensorView{out0.data(), {4}, DType::kF32},
                                  TensorView{out1.data(), {4}, DType::kF32}};
  Status act(ComputeBody& body, int slot, int64_t step, int64_t micro = 0) {
    const TensorView* in[] = {&views[static_cast<size_t>(slot)]};
    const TensorView* out[] = {&views[2 + static_cast<size_t>(slot)]};
    ActIo io;
    io.step = step;
    io.micro = micro;
    io.inputs = in;
    io.outputs = out;
    return body.act(io);
  }
};

ComputeBody body_of(const char* op, RecordingContext* cuda, bool graphs) {
  return ComputeBody(find_op(op), {}, nullptr, {}, {}, counting_kernel, cuda, {}, graphs);
}

TEST_CASE("a compute act on a GPU launches first, then captures each set of slots once and replays it") {
  RecordingContext cuda;
  g_launches = 0;
  {
    ComputeBody body = body_of("relu", &cuda, true);
    Slots slots;
    REQUIRE(slots.act(body, 0, 0).ok());  // the first act: directly
    CHECK(g_launches == 1);
    CHECK(cuda.captures == 0);
    CHECK(cuda.replays == 0);
    REQUIRE(slots.act(body, 1, 1).ok());  // slot 1: captured (the work recorded once), then replayed
    CHECK(g_launches == 2);
    CHECK(cuda.captures == 1);
    CHECK(cuda.replayed == std::vector<int>{1});
    REQUIRE(slots.act(body, 0, 2).ok());  // slot 0 again: its first capture
    REQUIRE(slots.act(body, 1, 3).ok());  // slot 1: replayed, the kernel not called
    REQUIRE(slots.act(body, 0, 4).ok());
    CHECK(g_launches == 3);
    CHECK(cuda.captures == 2);
    CHECK(cuda.replayed == std::vector<int>{1, 2, 1, 2});
    // The micro-batch index is part of what an act does (matmul adds after
    // the first): the same slots with another index are captured apart.
    REQUIRE(slots.act(body, 0, 5, 1).ok());
    REQUIRE(slots.act(body, 0, 5, 0).ok());
    CHECK(cuda.captures == 3);
    CHECK(cuda.replayed == std::vector<int>{1, 2, 1, 2, 3, 2});
  }
  CHECK(cuda.destroyed == 3);  // each graph, with its body
}

TEST_CASE("ops that read the step, and bodies without graphs, launch every act directly") {
  for (const auto& [op, graphs] : {std::pair{"dropout", true}, std::pair{"relu", false}}) {
    CAPTURE(op);
    RecordingContext cuda;
    g_launches = 0;
    ComputeBody body = body_of(op, &cuda, graphs);
    Slots slots;
    for (int step = 0; step < 6; ++step) REQUIRE(slots.act(body, step % 2, step).ok());
    CHECK(g_launches == 6);
    CHECK(cuda.captures == 0);
    CHECK(cuda.replays == 0);
  }
}

TEST_CASE("work a capture cannot hold launches directly from then on; any other capture error fails the act") {
  RecordingContext cuda;
  g_launches = 0;
  cuda.capture_result = Status(Code::kFailedPrecondition, "its work cannot be captured in a graph");
  ComputeBody body = body_of("relu", &cuda, true);
  Slots slots;
  for (int step = 0; step < 4; ++step) REQUIRE(slots.act(body, step % 2, step).ok());
  // Act 0 direct; act 1's capture records the work, fails, and it runs
  // directly; acts 2 and 3 directly, no capture tried.
  CHECK(g_launches == 5);
  CHECK(cuda.replays == 0);

  RecordingContext broken;
  broken.capture_result = internal_error("cudaGraphInstantiate failed");
  ComputeBody failing = body_of("relu", &broken, true);
  REQUIRE(slots.act(failing, 0, 0).ok());
  const Status status = slots.act(failing, 1, 1);
  CHECK(status.code() == Code::kInternal);
  CHECK(status.message().find("cudaGraphInstantiate") != std::string::npos);
}

}  // namespace
}  // namespace rill
