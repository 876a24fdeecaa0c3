// The CUDA module (kernels/cuda/cuda_module.h) is loaded when a process
// first asks for a GPU. Where the build made one, asking loads it, with or
// without a GPU: its kernels are found and its answer names the devices this
// machine has; in a build without CUDA the answer says so.
#include <doctest/doctest.h>

#include <string>

#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/nccl_comm.h"
#include "kernels/cuda_kernels.h"

namespace rill {
namespace {

TEST_CASE("asking for a GPU loads the CUDA module, which names the devices this machine has") {
  const int count = cuda_device_count();
  auto made = CudaContext::create(count);  // one past the last device
  REQUIRE_FALSE(made.ok());
  const std::string message = made.status().message();
  INFO(message);
#if RILL_WITH_CUDA
  CHECK(message.find(fmt::format("cuda:{}: this machine has {} CUDA device(s)", count, count)) != std::string::npos);
  const bool matmul = find_cuda_kernel("matmul") != nullptr, reduce = find_cuda_kernel("reduce_sum") != nullptr;
  CHECK(matmul);
  CHECK(reduce);
#else
  CHECK(message.find("no CUDA support") != std::string::npos);
  const bool matmul = find_cuda_kernel("matmul") != nullptr;
  CHECK_FALSE(matmul);
#endif
  const bool unknown = find_cuda_kernel("no_such_op") != nullptr;
  CHECK_FALSE(unknown);
}

TEST_CASE("whether NCCL can be used is said with its reason") {
  const bool available = nccl_available();
  const std::string reason = nccl_unavailable_reason();
  INFO(reason);
  CHECK(available == reason.empty());
  if (available) {
    CHECK(no_nccl_here("a node") == "a node has no NCCL it can use");
  } else {
    CHECK(no_nccl_here("a node") == "a node has no NCCL it can use (here: " + reason + ")");
  }
#if !RILL_WITH_CUDA
  CHECK(reason.find("no CUDA support") != std::string::npos);
#endif
}

}  // namespace
}  // namespace rill
