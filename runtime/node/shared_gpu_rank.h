// SharedGpuRank: a device collective's rank on a GPU that every rank of its
// communicator shares, one rank a node (agents on one machine's one GPU:
// NCCL refuses them), working in device memory instead of staging through
// the host. Each rank has an exchange buffer on the GPU (as large as the
// communicator's largest call), which the others map (CUDA IPC between
// processes, the pointer within one: kernels/cuda/shared_gpu.h). A call:
//   1. copies its input into its exchange buffer and waits for the copy;
//   2. meets the other ranks (a barrier among their nodes, on the host):
//      every exchange buffer holds its rank's input;
//   3. combines every rank's buffer, in rank order, into its output (an
//      all-reduce the whole, a reduce-scatter its block), or copies every
//      rank's block into it (an all-gather), and waits for that;
//   4. meets them again: no one reads its buffer any more, so the next call
//      may write it.
// Every rank combines the same values in the same order: the same bits on
// all, and the host collectives' bits. The waits leave the device thread's
// stream empty at the end of a call (its acts after it start afresh); the
// barriers cost a round trip among the agents (tens of microseconds on one
// machine), the copies and sums run at the GPU's memory bandwidth.
//
// Its device thread only, but for open(), before the run, from the thread
// that starts it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "actor/device_collective_body.h"
#include "comm/collectives.h"
#include "kernels/cuda/cuda_context.h"

namespace rill {

class SharedGpuRank final : public DeviceCommunicator {
 public:
  // Rank `rank` of `world` on `cuda`'s GPU; `among`: the collectives among
  // the communicator's nodes (rank r on the r-th), which outlive it.
  // Its barriers wait as long as `among`'s calls do (the run's stall timeout).
  SharedGpuRank(int rank, int world, CudaContext* cuda, comm::Collectives* among);
  ~SharedGpuRank() override;
  SharedGpuRank(const SharedGpuRank&) = delete;
  SharedGpuRank& operator=(const SharedGpuRank&) = delete;

  // Makes this rank's exchange buffer of `bytes` and maps every other
  // rank's, exchanging where they are over `among` (tag `tag`); every rank
  // calls it. false, on every rank alike, where one could not make its
  // buffer or map another's (then each has let go of the others' and freed
  // its own, and the communicator stages through the host instead); an
  // error where the exchange failed.
  StatusOr<bool> open(size_t bytes, uint64_t tag);
  // At the run's end, on every rank: unmaps the others' buffers, meets
  // them, then frees its own, so no buffer is freed while another process
  // maps it (which CUDA leaves undefined). Without it (a run that failed)
  // the buffer stays allocated until the process ends.
  Status close(uint64_t tag);

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  const char* backend() const override { return "shared"; }
  bool meets_on_host() const override { return true; }
  Status all_reduce(std::span<const void* const> inputs, std::span<void* const> outputs,
                    std::span<const size_t> elements, DType dtype, comm::ReduceOp op, uint64_t tag) override;
  Status reduce_scatter(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                        comm::ReduceOp op, uint64_t tag) override;
  Status all_gather(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                    uint64_t tag) override;
  // Each rank's blocks are where its own counts put them in its buffer:
  // the ranks exchange their counts as they meet (an all-gather on the
  // host in place of step 2's barrier), then each copies its block from
  // every buffer.
  Status all_to_all(const void* input, std::span<const size_t> send_counts, void* output,
                    std::span<const size_t> recv_counts, DType dtype, uint64_t tag) override;

 private:
  // Steps 1 and 2: `parts` (source, bytes) copied one after another into
  // the exchange buffer, then every rank's there (met even where the copy
  // failed, so no rank is left waiting).
  // `counts` (an all-to-all's blocks sent): met by gathering every rank's
  // into counts_ instead of a barrier.
  Status publish(std::span<const std::pair<const void*, size_t>> parts, comm::ReduceOp op, uint64_t tag,
                 std::span<const size_t> counts = {});
  // Step 3's wait (where `work` enqueued well) and step 4, met either way.
  Status finish(const Status& work, uint64_t tag);
  void unmap();
  const char* what(uint64_t tag);
  std::byte* peer(int r) const { return static_cast<std::byte*>(peers_[static_cast<size_t>(r)]); }

  const int rank_, world_, device_;
  CudaContext* cuda_;  // its device thread's
  comm::Collectives* among_;
  size_t capacity_ = 0;
  void* own_ = nullptr;
  std::vector<void*> peers_;   // every rank's exchange buffer, this one's included
  std::vector<bool> mapped_;   // opened by IPC (closed at the end)
  std::vector<const void*> sources_;
  std::vector<std::pair<const void*, size_t>> parts_;
  std::vector<uint64_t> counts_;  // an all-to-all's: every rank's blocks sent, rank-major
  std::map<uint64_t, std::string> whats_;
};

}  // namespace rill
