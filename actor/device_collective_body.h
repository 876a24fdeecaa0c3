// A device collective (plan.fbs BoxingConf.comm_group, train.nccl): one
// device's rank of a communicator among the devices of a placement (all, a
// node's, or a lane's). Each act all-reduces its input slots into its
// output slots (a bucket's gradients in one call), or reduce-scatters,
// all-gathers or sends each rank its block along one axis (split as pieces
// are), in the one order the plan chains on every rank.
//
// DeviceCommunicator is the rank's side of the communicator: on cuda devices
// NCCL's (the node's runtime makes them), on cpu devices the host's (a
// node's ranks meet in the process, their sum crosses nodes by the host's
// collectives: runtime/node/local_collective.h). The body knows neither.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "actor/body.h"
#include "base/collective_scratch.h"
#include "base/status.h"
#include "comm/collectives.h"
#include "kernels/tensor.h"

namespace rill {

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // "nccl" or "host".
  virtual const char* backend() const = 0;
  // Whether a call waits on other ranks' host threads (they meet in the
  // host), not only enqueues work that meets theirs on the devices.
  virtual bool meets_on_host() const = 0;
  // For blocks that are not contiguous (a split of columns): a buffer of
  // at least `bytes` in this rank's memory (its device's, or the host's),
  // kept for later calls; and `rows` rows of `width` bytes, `src_pitch`
  // apart, copied to rows `dst_pitch` apart there, ordered before the
  // rank's next call. A communicator the body never sees (one that another
  // delegates to) has neither.
  virtual StatusOr<void*> scratch(size_t bytes) {
    (void)bytes;
    return internal_error("{}: no scratch here", backend());
  }
  virtual Status copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                           size_t rows) {
    (void)dst, (void)dst_pitch, (void)src, (void)src_pitch, (void)width, (void)rows;
    return internal_error("{}: no copies here", backend());
  }
  // For every k: outputs[k] = inputs[k] combined by `op` over the ranks (the
  // same bits on every rank), elements[k] elements of `dtype` each; one call
  // of every rank with the same `tag`, sizes and order. On a GPU it is
  // enqueued on the device's stream (the body returns before it completes);
  // on the host it is done when it returns. inputs[k] may be outputs[k].
  virtual Status all_reduce(std::span<const void* const> inputs, std::span<void* const> outputs,
                            std::span<const size_t> elements, DType dtype, comm::ReduceOp op, uint64_t tag) = 0;
  // Blocks of input in rank order, rank r's counts[r] elements (world()
  // counts): output = rank()'s block combined over the ranks.
  virtual Status reduce_scatter(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                                comm::ReduceOp op, uint64_t tag) = 0;
  // output = every rank's input (rank r's counts[r] elements), in rank order.
  virtual Status all_gather(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                            uint64_t tag) = 0;
  // Input's blocks in rank order, send_counts[q] elements for rank q; output
  // = the blocks every rank sent this one, in rank order (recv_counts[r]
  // elements from rank r, which rank r's send_counts[rank()] agrees with).
  virtual Status all_to_all(const void* input, std::span<const size_t> send_counts, void* output,
                            std::span<const size_t> recv_counts, DType dtype, uint64_t tag) = 0;
};

class DeviceCollectiveBody {
 public:
  // `communicator` outlives the body (the node's runtime owns it); `call`
  // what it does (all-reduce, reduce-scatter, all-gather or all-to-all);
  // `tensors` the collective's tensors (an all-reduce's inputs k and outputs
  // k hold them whole; one tensor, split along one axis on one side, for
  // the others). `blocks`: a reduce-scatter's input's, an all-gather's
  // output's or an all-to-all's input's blocks by rank, `received` an
  // all-to-all's output's (split as pieces are, so by node, then device:
  // compiler/boxing_task.h). Blocks of columns (outer > 1) are packed one
  // after another in the communicator's scratch before they are sent, and
  // unpacked after they are received.
  DeviceCollectiveBody(DeviceCommunicator* communicator, CollectiveCall call, std::vector<TensorMeta> tensors,
                       AxisBlocks blocks, AxisBlocks received, comm::ReduceOp op, uint64_t tag, std::string name);
  Status act(const ActIo& io);
  // "all_reduce nccl", "all_gather host", ...
  std::string collective() const;
  // Whether an act waits for the other ranks' threads to come (a GPU's
  // thread sends what it holds for other threads first: one of them may
  // need it to get there).
  bool meets_on_host() const { return communicator_ != nullptr && communicator_->meets_on_host(); }

 private:
  DeviceCommunicator* communicator_;
  CollectiveCall call_;
  std::vector<TensorMeta> tensors_;
  comm::ReduceOp op_;
  uint64_t tag_;
  std::string name_;
  std::vector<size_t> elements_;
  AxisBlocks blocks_, received_;
  // `tensor`'s blocks (`b`, `elements` in all) packed one after another
  // into `packed`, or unpacked from it: rows of each block's slices,
  // between the tensor (pitch: all slices) and the packed blocks.
  Status pack(const AxisBlocks& b, size_t elements, std::byte* packed, const std::byte* tensor, bool into_packed);
  Status all_to_all(DType dtype);
  std::vector<const void*> in_;  // per act, sized once
  std::vector<void*> out_;
};

}  // namespace rill
