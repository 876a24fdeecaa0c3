// The CUDA module's NCCL: communicators made non-blocking, all-reduces
// enqueued on a context's compute stream (kernels/cuda/nccl_comm.h).
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include <fmt/ranges.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/nccl_comm.h"

namespace rill::nccl {
namespace {

using Clock = std::chrono::steady_clock;

Status nccl_status(ncclResult_t result, const char* call, const char* what) {
  if (result == ncclSuccess || result == ncclInProgress) return {};
  const char* last = ncclGetLastError(nullptr);
  return Status(result == ncclRemoteError || result == ncclSystemError ? Code::kUnavailable : Code::kInternal,
                fmt::format("{} ({}): {}{}{}", call, what, ncclGetErrorString(result),
                            last != nullptr && *last != '\0' ? ": " : "", last != nullptr ? last : ""));
}

// Polls a non-blocking communicator's state (`poll` writes it) until it
// leaves ncclInProgress, the work given it taken, or fails at `deadline`
// naming the call.
template <typename Poll>
Status settle(Poll&& poll, Clock::time_point deadline, const char* call, const char* what) {
  for (int spins = 0;; ++spins) {
    ncclResult_t state = ncclSuccess;
    RILL_RETURN_IF_ERROR(poll(&state));
    if (state != ncclInProgress) return nccl_status(state, call, what);
    if (Clock::now() >= deadline)
      return Status(Code::kDeadlineExceeded, fmt::format("{} ({}): NCCL did not finish it within its deadline "
                                                         "(a rank that never joined, or a peer gone)",
                                                         call, what));
    if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Status poll_state(ncclComm_t comm, ncclResult_t* state, const char* what) {
  return nccl_status(ncclCommGetAsyncError(comm, state), "ncclCommGetAsyncError", what);
}

StatusOr<ncclDataType_t> nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kI32: return ncclInt32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
  }
  return invalid_argument("NCCL: no type for dtype {}", static_cast<int>(dtype));
}

StatusOr<ncclRedOp_t> nccl_op(int op) {
  switch (op) {
    case 0: return ncclSum;
    case 1: return ncclMax;
    case 2: return ncclMin;
    case 3: return ncclProd;
    case 4: return ncclAvg;
    default: return invalid_argument("NCCL: no reduction for op {} (0 sum, 1 max, 2 min, 3 product, 4 average)", op);
  }
}

// One rank's communicator. Every NCCL call on it, and every poll of its
// state, holds mu_, and abort() takes mu_ too: ncclCommAbort frees the
// communicator, so no other thread may be inside a call on it then. No call
// waits with mu_ held (the communicator is non-blocking; settle() polls,
// letting go of mu_ between polls), so an abort is never kept waiting.
class Comm final : public NcclComm {
 public:
  Comm(ncclComm_t comm, int rank, int world, int device) : comm_(comm), rank_(rank), world_(world), device_(device) {}
  ~Comm() override { abort(); }
  int rank() const override { return rank_; }
  int world() const override { return world_; }

  Status all_reduce(std::span<const void* const> inputs, std::span<void* const> outputs,
                    std::span<const size_t> elements, DType dtype, int op, CudaContext& cuda,
                    std::chrono::milliseconds timeout, const char* what) override {
    if (inputs.size() != outputs.size() || inputs.size() != elements.size())
      return internal_error("ncclAllReduce ({}): {} inputs, {} outputs, {} sizes", what, inputs.size(),
                            outputs.size(), elements.size());
    RILL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(dtype));
    RILL_ASSIGN_OR_RETURN(ncclRedOp_t reduce, nccl_op(op));
    const auto stream = static_cast<cudaStream_t>(cuda.stream());
    const auto deadline = Clock::now() + timeout;
    {
      std::lock_guard lock(mu_);
      RILL_RETURN_IF_ERROR(usable(what));
      RILL_RETURN_IF_ERROR(nccl_status(ncclGroupStart(), "ncclGroupStart", what));
      for (size_t k = 0; k < inputs.size(); ++k) {
        Status s = nccl_status(ncclAllReduce(inputs[k], outputs[k], elements[k], type, reduce, comm_, stream),
                               "ncclAllReduce", what);
        if (!s.ok()) {
          (void)ncclGroupEnd();
          return s;
        }
      }
      RILL_RETURN_IF_ERROR(nccl_status(ncclGroupEnd(), "ncclGroupEnd", what));
    }
    return settle(deadline, "ncclAllReduce", what);
  }

  Status reduce_scatter(const void* input, void* output, std::span<const size_t> counts, DType dtype, int op,
                        CudaContext& cuda, std::chrono::milliseconds timeout, const char* what) override {
    RILL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(dtype));
    RILL_ASSIGN_OR_RETURN(ncclRedOp_t reduce, nccl_op(op));
    RILL_RETURN_IF_ERROR(check_counts(counts, "ncclReduceScatter", what));
    const auto stream = static_cast<cudaStream_t>(cuda.stream());
    const auto deadline = Clock::now() + timeout;
    {
      std::lock_guard lock(mu_);
      RILL_RETURN_IF_ERROR(usable(what));
      if (even(counts)) {
        RILL_RETURN_IF_ERROR(nccl_status(ncclReduceScatter(input, output, counts[0], type, reduce, comm_, stream),
                                         "ncclReduceScatter", what));
      } else {
        // Each block summed at its rank: one reduce per block, in one group.
        const auto* bytes = static_cast<const std::byte*>(input);
        RILL_RETURN_IF_ERROR(grouped(counts, what, [&](int root, size_t offset) {
          return nccl_status(ncclReduce(bytes + offset * dtype_size(dtype), output, counts[static_cast<size_t>(root)],
                                        type, reduce, root, comm_, stream),
                             "ncclReduce", what);
        }));
      }
    }
    return settle(deadline, "ncclReduceScatter", what);
  }

  Status all_gather(const void* input, void* output, std::span<const size_t> counts, DType dtype, CudaContext& cuda,
                    std::chrono::milliseconds timeout, const char* what) override {
    RILL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(dtype));
    RILL_RETURN_IF_ERROR(check_counts(counts, "ncclAllGather", what));
    const auto stream = static_cast<cudaStream_t>(cuda.stream());
    const auto deadline = Clock::now() + timeout;
    {
      std::lock_guard lock(mu_);
      RILL_RETURN_IF_ERROR(usable(what));
      if (even(counts)) {
        RILL_RETURN_IF_ERROR(nccl_status(ncclAllGather(input, output, counts[0], type, comm_, stream),
                                         "ncclAllGather", what));
      } else {
        // Each block sent from its rank to every rank's place for it.
        auto* bytes = static_cast<std::byte*>(output);
        RILL_RETURN_IF_ERROR(grouped(counts, what, [&](int root, size_t offset) {
          return nccl_status(ncclBroadcast(input, bytes + offset * dtype_size(dtype),
                                           counts[static_cast<size_t>(root)], type, root, comm_, stream),
                             "ncclBroadcast", what);
        }));
      }
    }
    return settle(deadline, "ncclAllGather", what);
  }

  Status all_to_all(const void* input, std::span<const size_t> send_counts, void* output,
                    std::span<const size_t> recv_counts, DType dtype, CudaContext& cuda,
                    std::chrono::milliseconds timeout, const char* what) override {
    RILL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(dtype));
    RILL_RETURN_IF_ERROR(check_counts(send_counts, "ncclSend", what));
    RILL_RETURN_IF_ERROR(check_counts(recv_counts, "ncclRecv", what));
    const auto stream = static_cast<cudaStream_t>(cuda.stream());
    const auto deadline = Clock::now() + timeout;
    const size_t element = dtype_size(dtype);
    {
      std::lock_guard lock(mu_);
      RILL_RETURN_IF_ERROR(usable(what));
      RILL_RETURN_IF_ERROR(nccl_status(ncclGroupStart(), "ncclGroupStart", what));
      const auto* from = static_cast<const std::byte*>(input);
      auto* to = static_cast<std::byte*>(output);
      Status s;
      for (int peer = 0; s.ok() && peer < world_; ++peer) {
        const auto p = static_cast<size_t>(peer);
        // Zero-sized blocks are skipped on both sides alike (the counts agree).
        if (send_counts[p] > 0)
          s = nccl_status(ncclSend(from, send_counts[p], type, peer, comm_, stream), "ncclSend", what);
        if (s.ok() && recv_counts[p] > 0)
          s = nccl_status(ncclRecv(to, recv_counts[p], type, peer, comm_, stream), "ncclRecv", what);
        from += send_counts[p] * element;
        to += recv_counts[p] * element;
      }
      if (!s.ok()) {
        (void)ncclGroupEnd();
        return s;
      }
      RILL_RETURN_IF_ERROR(nccl_status(ncclGroupEnd(), "ncclGroupEnd", what));
    }
    return settle(deadline, "ncclSend/ncclRecv", what);
  }

  Status reduce(const void* input, void* output, size_t elements, DType dtype, int op, int root, CudaContext& cuda,
                std::chrono::milliseconds timeout, const char* what) override {
    RILL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(dtype));
    RILL_ASSIGN_OR_RETURN(ncclRedOp_t reduce, nccl_op(op));
    RILL_RETURN_IF_ERROR(check_peer(root, "ncclReduce", what));
    return one_call("ncclReduce", timeout, what, [&](cudaStream_t stream) {
      return ncclReduce(input, output, elements, type, reduce, root, comm_, stream);
    }, cuda);
  }

  Status broadcast(const void* input, void* output, size_t elements, DType dtype, int root, CudaContext& cuda,
                   std::chrono::milliseconds timeout, const char* what) override {
    RILL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(dtype));
    RILL_RETURN_IF_ERROR(check_peer(root, "ncclBroadcast", what));
    return one_call("ncclBroadcast", timeout, what, [&](cudaStream_t stream) {
      return ncclBroadcast(input, output, elements, type, root, comm_, stream);
    }, cuda);
  }

  Status send(const void* data, size_t elements, DType dtype, int peer, CudaContext& cuda,
              std::chrono::milliseconds timeout, const char* what) override {
    RILL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(dtype));
    RILL_RETURN_IF_ERROR(check_peer(peer, "ncclSend", what));
    return one_call("ncclSend", timeout, what, [&](cudaStream_t stream) {
      return ncclSend(data, elements, type, peer, comm_, stream);
    }, cuda);
  }

  Status recv(void* data, size_t elements, DType dtype, int peer, CudaContext& cuda,
              std::chrono::milliseconds timeout, const char* what) override {
    RILL_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(dtype));
    RILL_RETURN_IF_ERROR(check_peer(peer, "ncclRecv", what));
    return one_call("ncclRecv", timeout, what, [&](cudaStream_t stream) {
      return ncclRecv(data, elements, type, peer, comm_, stream);
    }, cuda);
  }

  Status check(const char* what) override {
    std::lock_guard lock(mu_);
    if (aborted_) return {};
    ncclResult_t state = ncclSuccess;
    RILL_RETURN_IF_ERROR(poll_state(comm_, &state, what));
    return nccl_status(state, "NCCL (a call under way or done)", what);
  }

  void abort() override {
    Comm* self = this;
    abort_together(std::span<Comm* const>(&self, 1));
  }

  // Aborts `comms` in one NCCL group (inside one, ncclCommAbort only sets
  // the communicator's abort flag and leaves its clean-up, which waits for
  // its work on the stream to end, to ncclGroupEnd): every flag is set
  // before any clean-up waits. Each one's mu_ held throughout, taken in
  // address order.
  static void abort_together(std::span<Comm* const> comms) {
    std::vector<Comm*> sorted(comms.begin(), comms.end());
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    std::vector<std::unique_lock<std::mutex>> locks;
    for (Comm* c : sorted) locks.emplace_back(c->mu_);
    int current = -1;
    const bool known = cudaGetDevice(&current) == cudaSuccess;
    (void)ncclGroupStart();
    for (Comm* c : sorted) {
      if (c->aborted_) continue;
      c->aborted_ = true;
      (void)cudaSetDevice(c->device_);
      (void)ncclCommAbort(c->comm_);
    }
    (void)ncclGroupEnd();
    if (known) (void)cudaSetDevice(current);  // the caller's thread keeps its device
  }

 private:
  // With mu_ held: not aborted, no error NCCL met since, and the last call
  // taken (a non-blocking communicator refuses work while one is in
  // progress: after a call's deadline passed, every later one fails).
  Status usable(const char* what) {
    if (aborted_) return Status(Code::kAborted, fmt::format("NCCL ({}): the communicator was aborted", what));
    ncclResult_t state = ncclSuccess;
    RILL_RETURN_IF_ERROR(poll_state(comm_, &state, what));
    if (state == ncclInProgress)
      return Status(Code::kDeadlineExceeded,
                    fmt::format("NCCL ({}): an earlier call on the communicator is still in progress", what));
    return nccl_status(state, "NCCL (an earlier call)", what);
  }

  Status check_counts(std::span<const size_t> counts, const char* call, const char* what) const {
    if (counts.size() != static_cast<size_t>(world_))
      return internal_error("{} ({}): {} blocks for {} ranks", call, what, counts.size(), world_);
    return {};
  }
  Status check_peer(int peer, const char* call, const char* what) const {
    if (peer < 0 || peer >= world_) return invalid_argument("{} ({}): rank {} of {}", call, what, peer, world_);
    return {};
  }
  // One NCCL call, `enqueue(stream)`, under mu_ on a usable communicator,
  // then waited for until NCCL took it (as every call here).
  template <typename Enqueue>
  Status one_call(const char* call, std::chrono::milliseconds timeout, const char* what, Enqueue&& enqueue,
                  CudaContext& cuda) {
    const auto stream = static_cast<cudaStream_t>(cuda.stream());
    const auto deadline = Clock::now() + timeout;
    {
      std::lock_guard lock(mu_);
      RILL_RETURN_IF_ERROR(usable(what));
      RILL_RETURN_IF_ERROR(nccl_status(enqueue(stream), call, what));
    }
    return settle(deadline, call, what);
  }
  static bool even(std::span<const size_t> counts) {
    return std::all_of(counts.begin(), counts.end(), [&](size_t n) { return n == counts[0]; });
  }
  // With mu_ held: `call(root, offset)` for every rank's block (its first
  // element's offset) in one NCCL group.
  template <typename Call>
  Status grouped(std::span<const size_t> counts, const char* what, Call&& call) {
    RILL_RETURN_IF_ERROR(nccl_status(ncclGroupStart(), "ncclGroupStart", what));
    size_t offset = 0;
    for (size_t root = 0; root < counts.size(); ++root) {
      Status s = call(static_cast<int>(root), offset);
      if (!s.ok()) {
        (void)ncclGroupEnd();
        return s;
      }
      offset += counts[root];
    }
    return nccl_status(ncclGroupEnd(), "ncclGroupEnd", what);
  }

  // Waits until the work just given is taken, or fails at `deadline`, or
  // as aborted when abort() came meanwhile: each poll under mu_, none
  // between them.
  Status settle(Clock::time_point deadline, const char* call, const char* what) {
    return rill::nccl::settle(
        [&](ncclResult_t* state) -> Status {
          std::lock_guard lock(mu_);
          if (aborted_) return Status(Code::kAborted, fmt::format("{} ({}): the communicator was aborted", call, what));
          return poll_state(comm_, state, what);
        },
        deadline, call, what);
  }

  ncclComm_t comm_;
  const int rank_, world_, device_;
  std::mutex mu_;
  bool aborted_ = false;  // guarded by mu_
};

}  // namespace

void abort(std::span<NcclComm* const> comms) {
  std::vector<Comm*> mine;
  for (NcclComm* c : comms)
    if (auto* comm = dynamic_cast<Comm*>(c)) mine.push_back(comm);
  Comm::abort_together(mine);
}

StatusOr<NcclComm::Id> make_id() {
  ncclUniqueId id;
  RILL_RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId", "a communicator's id"));
  NcclComm::Id out;
  static_assert(sizeof(id) == NcclComm::kIdBytes);
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

StatusOr<std::vector<std::unique_ptr<NcclComm>>> init(const NcclComm::Id& id, int world, std::span<const int> ranks,
                                                     std::span<const int> devices, std::chrono::milliseconds timeout,
                                                     const std::atomic<bool>* cancelled) {
  if (ranks.size() != devices.size() || ranks.empty() || world < 1)
    return invalid_argument("ncclCommInitRankConfig: {} ranks on {} devices of a {}-rank communicator", ranks.size(),
                            devices.size(), world);
  ncclUniqueId unique;
  std::memcpy(&unique, id.data(), sizeof(unique));
  const auto deadline = Clock::now() + timeout;
  const std::string what = fmt::format("ranks {} of {} on cuda:{}", fmt::join(ranks, ","), world,
                                       fmt::join(devices, ",cuda:"));
  // Connections made here, while every rank is in this call (a user's
  // NCCL_RUNTIME_CONNECT wins; NCCL reads it when a communicator is made).
  static std::once_flag connect_at_init;
  std::call_once(connect_at_init, [] { (void)setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0); });
  int current = -1;
  const bool known = cudaGetDevice(&current) == cudaSuccess;
  std::vector<ncclComm_t> comms(ranks.size(), nullptr);
  auto abort_all = [&] {
    (void)ncclGroupStart();
    for (size_t i = 0; i < comms.size(); ++i)
      if (comms[i] != nullptr) {
        (void)cudaSetDevice(devices[i]);
        (void)ncclCommAbort(comms[i]);
      }
    (void)ncclGroupEnd();
  };
  Status status = nccl_status(ncclGroupStart(), "ncclGroupStart", what.c_str());
  for (size_t i = 0; status.ok() && i < ranks.size(); ++i) {
    status = cuda_status(cudaSetDevice(devices[i]), "cudaSetDevice", what.c_str());
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    if (status.ok())
      status = nccl_status(ncclCommInitRankConfig(&comms[i], world, unique, ranks[i], &config),
                           "ncclCommInitRankConfig", what.c_str());
  }
  Status ended = nccl_status(ncclGroupEnd(), "ncclGroupEnd", what.c_str());
  if (status.ok()) status = ended;
  for (size_t i = 0; status.ok() && i < comms.size(); ++i)
    status = settle(
        [&](ncclResult_t* state) {
          if (cancelled != nullptr && cancelled->load())
            return Status(Code::kAborted, fmt::format("ncclCommInitRankConfig ({}): the run was stopped", what));
          return poll_state(comms[i], state, what.c_str());
        },
        deadline, "ncclCommInitRankConfig", what.c_str());
  if (!status.ok()) abort_all();
  if (known) (void)cudaSetDevice(current);  // the caller's thread keeps its device
  if (!status.ok()) return status;
  std::vector<std::unique_ptr<NcclComm>> out;
  for (size_t i = 0; i < comms.size(); ++i) out.push_back(std::make_unique<Comm>(comms[i], ranks[i], world, devices[i]));
  return out;
}

}  // namespace rill::nccl
