// Device collectives from a program: started by `rill launch` on every rank,
// it gets its device's communicator from the environment
// (rill::env::device_communicator: NCCL on GPUs, the host's on cpu) and
// calls collectives on buffers in its device's memory, as a program using
// torch.distributed's NCCL backend does:
//   build/rill launch --nproc_per_node 2 build/samples/device_collectives_demo
//   build/rill launch --nproc_per_node 1 --device cuda build/samples/device_collectives_demo
// Rank r holds x = [r + 1, 2 (r + 1), ..., 2 world (r + 1)]; every rank
// prints the all-reduced sum, its block of the reduce-scatter, the
// all-gather of its first two elements, and the all-to-all of blocks whose
// values say where they came from (100 r + q for rank q's block).
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/cluster/device_group.h"

namespace {

// A buffer in the device's memory (or the host's), and back.
class Buffer {
 public:
  Buffer(rill::CudaContext* cuda, std::vector<float> values) : cuda_(cuda), host_(std::move(values)) {
    if (cuda_ == nullptr) return;
    auto at = cuda_->allocate(host_.size() * sizeof(float), "a demo buffer");
    if (!at.ok()) die(at.status());
    device_ = *at;
    check(cuda_->copy(device_, host_.data(), bytes(), rill::CopyKind::kHostToDevice, "a demo buffer"));
  }
  ~Buffer() {
    if (cuda_ != nullptr) cuda_->release(device_);
  }
  void* data() { return cuda_ != nullptr ? device_ : host_.data(); }
  // The values, once the device's work on them is done.
  const std::vector<float>& values() {
    if (cuda_ != nullptr) {
      check(cuda_->copy(host_.data(), device_, bytes(), rill::CopyKind::kDeviceToHost, "a demo result"));
      check(cuda_->synchronize("a demo result"));
    }
    return host_;
  }
  static void check(const rill::Status& s) {
    if (!s.ok()) die(s);
  }
  [[noreturn]] static void die(const rill::Status& s) {
    std::fprintf(stderr, "device_collectives_demo: %s\n", s.to_string().c_str());
    std::exit(1);
  }

 private:
  size_t bytes() const { return host_.size() * sizeof(float); }
  rill::CudaContext* cuda_;
  std::vector<float> host_;
  void* device_ = nullptr;
};

}  // namespace

int main() {
  auto group = rill::env::device_communicator();
  if (!group.ok()) Buffer::die(group.status());
  rill::DeviceCommunicator& c = (*group)->communicator();
  rill::CudaContext* cuda = (*group)->cuda();
  const int rank = c.rank(), world = c.world();
  const size_t n = 2 * static_cast<size_t>(world);
  std::vector<float> x(n), to_each(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>((i + 1) * static_cast<size_t>(rank + 1));
    to_each[i] = static_cast<float>(100 * rank + static_cast<int>(i / 2));  // block q: 100 r + q
  }
  const std::vector<size_t> blocks(static_cast<size_t>(world), 2);
  Buffer in(cuda, x), sum(cuda, std::vector<float>(n)), block(cuda, std::vector<float>(2)),
      gathered(cuda, std::vector<float>(n)), sent(cuda, to_each), received(cuda, std::vector<float>(n));
  const void* inputs[] = {in.data()};
  void* outputs[] = {sum.data()};
  const size_t elements[] = {n};
  Buffer::check(c.all_reduce(inputs, outputs, elements, rill::DType::kF32, rill::comm::ReduceOp::kSum, 1));
  Buffer::check(c.reduce_scatter(in.data(), block.data(), blocks, rill::DType::kF32, rill::comm::ReduceOp::kSum, 2));
  Buffer::check(c.all_gather(in.data(), gathered.data(), blocks, rill::DType::kF32, 3));
  Buffer::check(c.all_to_all(sent.data(), blocks, received.data(), blocks, rill::DType::kF32, 4));
  Buffer::check((*group)->host().barrier(5));  // every rank has what it needs before any closes its sockets
  std::printf("rank %d of %d (%s): sum %s block %s gathered %s received %s\n", rank, world, (*group)->backend(),
              fmt::format("{}", sum.values()).c_str(), fmt::format("{}", block.values()).c_str(),
              fmt::format("{}", gathered.values()).c_str(), fmt::format("{}", received.values()).c_str());
  return 0;
}
