// Device collectives from a program: started by `rill launch` on every rank,
// it gets its device's communicator from the environment
// (rill::env::device_communicator: NCCL on GPUs, the host's on cpu) and
// calls collectives on buffers in its device's memory, as a program using
// torch.distributed's NCCL backend does:
//   build/rill launch --nproc_per_node 2 build/samples/device_collectives_demo
//   build/rill launch --nproc_per_node 1 --device cuda build/samples/device_collectives_demo
// Rank r holds x = [r + 1, 2 (r + 1), ..., 2 world (r + 1)]; every rank
// prints its results of comm/collectives.h's eleven on device buffers: the
// all-reduced sum, max and average, its block of the reduce-scatter, the
// all-gather of its first two elements, the all-to-all of blocks whose
// values say where they came from (100 r + q for rank q's block), the last
// rank's x broadcast, its block of the last rank's blocks scattered, and
// what the rank before it sent (around a ring); the last rank (the root of
// the rooted calls) also its reduce and gather.
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
  rill::DeviceGroup& g = **group;
  rill::CudaContext* cuda = g.cuda();
  const int rank = g.rank(), world = g.world();
  const size_t n = 2 * static_cast<size_t>(world);
  std::vector<float> x(n), to_each(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>((i + 1) * static_cast<size_t>(rank + 1));
    to_each[i] = static_cast<float>(100 * rank + static_cast<int>(i / 2));  // block q: 100 r + q
  }
  using rill::DType;
  using rill::comm::ReduceOp;
  Buffer in(cuda, x), sum(cuda, std::vector<float>(n)), max(cuda, std::vector<float>(n)),
      average(cuda, std::vector<float>(n)), reduced(cuda, std::vector<float>(n)), block(cuda, std::vector<float>(2)),
      gathered(cuda, std::vector<float>(n)), sent(cuda, to_each), received(cuda, std::vector<float>(n)),
      from_root(cuda, x), at_root(cuda, std::vector<float>(n)), scattered(cuda, std::vector<float>(2)),
      passed(cuda, std::vector<float>(2, -1.0f));
  Buffer::check(g.all_reduce(in.data(), sum.data(), n, DType::kF32, ReduceOp::kSum, 1));
  Buffer::check(g.all_reduce(in.data(), max.data(), n, DType::kF32, ReduceOp::kMax, 2));
  Buffer::check(g.all_reduce(in.data(), average.data(), n, DType::kF32, ReduceOp::kAverage, 3));
  const int root = world - 1;  // rooted calls at the last rank
  Buffer::check(g.reduce(in.data(), reduced.data(), n, DType::kF32, ReduceOp::kSum, root, 4));
  Buffer::check(g.reduce_scatter(in.data(), block.data(), 2, DType::kF32, ReduceOp::kSum, 5));
  Buffer::check(g.all_gather(in.data(), gathered.data(), 2, DType::kF32, 6));
  Buffer::check(g.all_to_all(sent.data(), received.data(), 2, DType::kF32, 7));
  Buffer::check(g.broadcast(from_root.data(), n, DType::kF32, root, 8));
  Buffer::check(g.gather(in.data(), at_root.data(), 2, DType::kF32, root, 9));
  Buffer::check(g.scatter(sent.data(), scattered.data(), 2, DType::kF32, root, 10));
  // Around a ring: each rank sends its first two elements to the next.
  if (world > 1) {
    const int next = (rank + 1) % world, last = (rank + world - 1) % world;
    if (rank % 2 == 0) {
      Buffer::check(g.send(in.data(), 2, DType::kF32, next, 11));
      Buffer::check(g.recv(passed.data(), 2, DType::kF32, last, 11));
    } else {
      Buffer::check(g.recv(passed.data(), 2, DType::kF32, last, 11));
      Buffer::check(g.send(in.data(), 2, DType::kF32, next, 11));
    }
  }
  Buffer::check(g.barrier(12));  // every rank has what it needs before any closes its sockets
  std::string line = fmt::format("rank {} of {} ({}): sum {} max {} average {} block {} gathered {} received {} "
                                 "broadcast {} scattered {} passed {}",
                                 rank, world, g.backend(), sum.values(), max.values(), average.values(),
                                 block.values(), gathered.values(), received.values(), from_root.values(),
                                 scattered.values(), passed.values());
  if (rank == root) line += fmt::format(" reduced {} at root {}", reduced.values(), at_root.values());
  std::printf("%s\n", line.c_str());
  return 0;
}
