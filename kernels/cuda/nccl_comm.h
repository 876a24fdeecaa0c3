// NcclComm: one rank's NCCL communicator, for a device collective's ranks on
// GPUs (train.nccl; the runtime's side is runtime/node/boxing_setup.cc).
// The header names no NCCL type; NCCL lives in the CUDA module with the rest
// of CUDA (kernels/cuda/cuda_module.h), so a process that never asks for a
// GPU maps no NCCL either. NCCL's errors become Rill errors naming the call,
// what it was for and NCCL's own last words.
//
// Communicators are made non-blocking: nothing here waits past the deadline
// it is given (a peer that never comes, a hung call), and abort() may come
// from any thread while another waits on the communicator.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace rill {

class NcclComm {
 public:
  static constexpr size_t kIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
  using Id = std::array<std::byte, kIdBytes>;

  virtual ~NcclComm() = default;  // ncclCommAbort: never waits for a peer
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // For every k: outputs[k] = inputs[k] combined over the ranks by `op`
  // (0 sum, 1 max, 2 min, 3 product, 4 average: comm::ReduceOp's values; an
  // average of floats only), elements[k]
  // elements of `dtype`, enqueued on `cuda`'s compute stream in one NCCL
  // group (one launch for a bucket), waiting at most `timeout` for NCCL to
  // take it.
  virtual Status all_reduce(std::span<const void* const> inputs, std::span<void* const> outputs,
                            std::span<const size_t> elements, DType dtype, int op, CudaContext& cuda,
                            std::chrono::milliseconds timeout, const char* what) = 0;
  // Blocks in rank order, rank r's counts[r] elements (world() counts):
  // output = rank()'s block of input combined over the ranks; output =
  // every rank's input, in rank order. Enqueued alike: blocks of one size
  // as one ncclReduceScatter or ncclAllGather, others as one NCCL group of
  // an ncclReduce or ncclBroadcast rooted at each block's rank.
  virtual Status reduce_scatter(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                                int op, CudaContext& cuda, std::chrono::milliseconds timeout, const char* what) = 0;
  virtual Status all_gather(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                            CudaContext& cuda, std::chrono::milliseconds timeout, const char* what) = 0;
  // Input's blocks in rank order (send_counts[q] elements for rank q) sent,
  // every rank's block for this one received into output in rank order
  // (recv_counts[r] from rank r): one NCCL group of an ncclSend and an
  // ncclRecv per rank with a block (this one's own included), enqueued alike.
  virtual Status all_to_all(const void* input, std::span<const size_t> send_counts, void* output,
                            std::span<const size_t> recv_counts, DType dtype, CudaContext& cuda,
                            std::chrono::milliseconds timeout, const char* what) = 0;
  // output (root's) = input combined over the ranks by `op`; every rank's
  // output = root's input (output may be input); `elements` each. Enqueued
  // alike.
  virtual Status reduce(const void* input, void* output, size_t elements, DType dtype, int op, int root,
                        CudaContext& cuda, std::chrono::milliseconds timeout, const char* what) = 0;
  virtual Status broadcast(const void* input, void* output, size_t elements, DType dtype, int root,
                           CudaContext& cuda, std::chrono::milliseconds timeout, const char* what) = 0;
  // Point to point: `elements` to rank `peer`, or from it (ncclSend,
  // ncclRecv), enqueued alike.
  virtual Status send(const void* data, size_t elements, DType dtype, int peer, CudaContext& cuda,
                      std::chrono::milliseconds timeout, const char* what) = 0;
  virtual Status recv(void* data, size_t elements, DType dtype, int peer, CudaContext& cuda,
                      std::chrono::milliseconds timeout, const char* what) = 0;
  // An error NCCL met since (a peer gone, a network failure), without
  // waiting; a call under way on another thread is no error, nor is an
  // aborted communicator (its abort was asked for). Any thread.
  virtual Status check(const char* what) = 0;
  // Ends every call on the communicator now (ncclCommAbort); later calls
  // fail. Several communicators sharing a stream: nccl_abort, all at once.
  virtual void abort() = 0;
};

// Whether this process's CUDA module has NCCL (a module built where libnccl
// was not found has none). The module links libnccl.so.2: a machine whose
// libnccl lacks a call it makes (older than 2.14) fails the module's load,
// which names the missing symbol. ncclConfig_t is read by NCCL 2.14+ by
// its size and version, so a module built against a newer header (2.28.9)
// runs with an older 2.14+ library (2.28.3 declares the same struct).
bool nccl_available();

// Why NCCL cannot be used in this process, or "" when it can.
std::string nccl_unavailable_reason();

// "`who` has no NCCL it can use", with this process's reason where it is the
// one: for the line that says a collective falls back to host memory.
std::string no_nccl_here(std::string_view who);

// A new communicator's id, made by its first rank and sent to the others.
StatusOr<NcclComm::Id> nccl_unique_id();

// This process's ranks `ranks` (on GPUs `devices`, one each) of a
// `world`-rank communicator `id`, made together in one NCCL group, within
// `timeout` (every rank of every process must call it), or given up as
// aborted once `*cancelled` (if given) is set. Unless the environment says
// otherwise, NCCL makes its connections here (NCCL_RUNTIME_CONNECT=0),
// while every rank is in this call, not at a collective's first use, where
// a rank waiting for its peers would hold up its device thread.
StatusOr<std::vector<std::unique_ptr<NcclComm>>> nccl_init(const NcclComm::Id& id, int world,
                                                          std::span<const int> ranks, std::span<const int> devices,
                                                          std::chrono::milliseconds timeout,
                                                          const std::atomic<bool>* cancelled = nullptr);

// Aborts every one of `comms` (made by nccl_init) together, in one NCCL
// group: each one's abort flag is set before any waits for its work to end,
// so a stream holding calls of several communicators (a node's devices and
// a lane: train.nccl with 2-D SBP) never waits on a call of one not yet
// aborted. Any thread; aborting one twice does nothing.
void nccl_abort(std::span<NcclComm* const> comms);

// The module's own (nccl_comm.cc), which the ones above reach through its
// table (cuda_module.h).
namespace nccl {
StatusOr<NcclComm::Id> make_id();
StatusOr<std::vector<std::unique_ptr<NcclComm>>> init(const NcclComm::Id& id, int world, std::span<const int> ranks,
                                                     std::span<const int> devices, std::chrono::milliseconds timeout,
                                                     const std::atomic<bool>* cancelled);
void abort(std::span<NcclComm* const> comms);
}  // namespace nccl

}  // namespace rill
