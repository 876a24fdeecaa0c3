#include "runtime/cluster/device_group.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "runtime/cluster/env.h"

namespace rill {
namespace {

// The set-up's host collectives: tags far above any a program would pick.
constexpr uint64_t kGpusTag = ~uint64_t{0} - 1;
constexpr uint64_t kIdTag = ~uint64_t{0} - 2;

// RILL_DEVICE: "cpu" (or unset) is -1; "cuda" or "cuda:N" is N (0 by default).
StatusOr<int> device_of_environment() {
  const char* value = std::getenv("RILL_DEVICE");
  const std::string device = value == nullptr ? "" : value;
  if (device.empty() || device == "cpu") return -1;
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.size() <= 8 &&
      std::all_of(device.begin() + 5, device.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::stoi(device.substr(5));
  return invalid_argument("RILL_DEVICE={} (environment): expected cpu, cuda or cuda:N", device);
}

template <typename T>
std::span<const T> in_span(const void* p, size_t n) {
  return {static_cast<const T*>(p), n};
}
template <typename T>
std::span<T> out_span(void* p, size_t n) {
  return {static_cast<T*>(p), n};
}
std::span<const std::byte> in_bytes(const void* p, size_t n) { return {static_cast<const std::byte*>(p), n}; }
std::span<std::byte> out_bytes(void* p, size_t n) { return {static_cast<std::byte*>(p), n}; }

}  // namespace

DeviceGroup::~DeviceGroup() {
  // The work enqueued is done first (within the deadline, else the
  // communicator is aborted); then NCCL's communicators go, then the
  // context whose stream they used.
  if (Status s = drain("closing"); !s.ok()) spdlog::warn("device collectives: {}", s.to_string());
  nccl_ = nullptr;
  nccl_comms_.clear();
}

StatusOr<std::unique_ptr<DeviceGroup>> make_device_group(std::chrono::milliseconds timeout) {
  std::unique_ptr<DeviceGroup> g(new DeviceGroup());
  RILL_ASSIGN_OR_RETURN(g->host_, env::communicator(timeout));
  comm::Collectives& host = *g->host_.collectives;
  g->rank_ = host.rank();
  g->world_ = host.world();
  g->timeout_ = timeout;
  RILL_ASSIGN_OR_RETURN(const int device, device_of_environment());
  if (device >= 0) {
    RILL_ASSIGN_OR_RETURN(g->cuda_, CudaContext::create(device));
  }
  // Every process's device kind, GPU and whether it has NCCL, so all
  // choose alike (or refuse alike, where some are on GPUs and some not).
  constexpr size_t kEach = 18;
  const auto world = static_cast<size_t>(g->world_);
  std::vector<std::byte> mine(kEach), all(kEach * world);
  mine[0] = std::byte{device >= 0 ? uint8_t{1} : uint8_t{0}};
  if (g->cuda_) {
    RILL_ASSIGN_OR_RETURN(const auto uuid, g->cuda_->uuid("a program's device collectives"));
    std::memcpy(mine.data() + 1, uuid.data(), 16);
  }
  mine[17] = std::byte{device >= 0 && nccl_available() ? uint8_t{1} : uint8_t{0}};
  if (world > 1) {
    RILL_RETURN_IF_ERROR(host.all_gather(mine, all, kGpusTag).with_context("gathering the processes' devices"));
  } else {
    all = mine;
  }
  std::vector<std::array<std::byte, 16>> gpus(world);
  bool nccl = true;
  std::vector<size_t> on_gpus, on_cpus;
  for (size_t r = 0; r < world; ++r) {
    (all[r * kEach] == std::byte{1} ? on_gpus : on_cpus).push_back(r);
    std::memcpy(gpus[r].data(), all.data() + r * kEach + 1, 16);
    nccl = nccl && all[r * kEach + 17] == std::byte{1};
  }
  if (!on_gpus.empty() && !on_cpus.empty())
    return invalid_argument("device collectives: rank(s) {} are on GPUs and rank(s) {} on cpu (RILL_DEVICE; rill "
                            "launch --device on every node alike)",
                            fmt::join(on_gpus, ", "), fmt::join(on_cpus, ", "));
  if (device < 0) return g;  // cpu: the host's collectives
  std::sort(gpus.begin(), gpus.end());
  if (std::unique(gpus.begin(), gpus.end()) != gpus.end() || !nccl) {
    if (g->rank_ == 0)
      spdlog::info("device collectives of {} processes: {}: they cross through host memory", world,
                   nccl ? "processes share a GPU, which NCCL refuses" : no_nccl_here("a process"));
    return g;
  }
  NcclComm::Id id{};
  if (g->rank_ == 0) {
    RILL_ASSIGN_OR_RETURN(id, nccl_unique_id());
  }
  if (world > 1) RILL_RETURN_IF_ERROR(host.broadcast(id, 0, kIdTag).with_context("sending the NCCL id from rank 0"));
  const int ranks[] = {g->rank_}, devices[] = {device};
  RILL_ASSIGN_OR_RETURN(g->nccl_comms_, nccl_init(id, g->world_, ranks, devices, timeout));
  g->nccl_ = g->nccl_comms_.front().get();
  return g;
}

const char* DeviceGroup::what(const char* call) {
  what_ = fmt::format("{} of rank {} of {} ({})", call, rank_, world_, backend());
  return what_.c_str();
}

Status DeviceGroup::check(DType dtype, comm::ReduceOp op, int peer, const char* call) const {
  if (op == comm::ReduceOp::kAverage && dtype == DType::kI32)
    return invalid_argument("{}: an average of i32 elements (average floats, or sum)", call);
  if (peer < 0 || peer >= world_) return invalid_argument("{}: rank {} of {}", call, peer, world_);
  return {};
}

template <typename Call>
Status DeviceGroup::on_host(const void* input, size_t in_bytes, void* output, size_t out_bytes, Call&& call) {
  if (!cuda_) return call(input, output);
  staged_in_.resize(std::max(staged_in_.size(), in_bytes));
  staged_out_.resize(std::max(staged_out_.size(), out_bytes));
  if (in_bytes > 0) {
    RILL_RETURN_IF_ERROR(cuda_->copy(staged_in_.data(), input, in_bytes, CopyKind::kDeviceToHost, what("staging")));
    RILL_RETURN_IF_ERROR(cuda_->synchronize(what_.c_str()));  // the bytes are there before the host reads them
  }
  RILL_RETURN_IF_ERROR(call(staged_in_.data(), staged_out_.data()));
  if (out_bytes == 0) return {};
  RILL_RETURN_IF_ERROR(cuda_->copy(output, staged_out_.data(), out_bytes, CopyKind::kHostToDevice, what("staging")));
  return cuda_->synchronize(what_.c_str());
}

Status DeviceGroup::all_reduce(const void* input, void* output, size_t elements, DType dtype, comm::ReduceOp op,
                               uint64_t tag) {
  RILL_RETURN_IF_ERROR(check(dtype, op, 0, "all_reduce"));
  if (nccl_ != nullptr) {
    const void* in[] = {input};
    void* out[] = {output};
    const size_t n[] = {elements};
    return nccl_->all_reduce(in, out, n, dtype, static_cast<int>(op), *cuda_, timeout_, what("all_reduce"));
  }
  const size_t bytes = elements * dtype_size(dtype);
  return on_host(input, bytes, output, bytes, [&](const void* in, void* out) {
    return visit_dtype(dtype, [&]<typename T>(std::type_identity<T>) {
      return host().all_reduce(in_span<T>(in, elements), out_span<T>(out, elements), tag, op);
    });
  });
}

Status DeviceGroup::reduce(const void* input, void* output, size_t elements, DType dtype, comm::ReduceOp op,
                           int root, uint64_t tag) {
  RILL_RETURN_IF_ERROR(check(dtype, op, root, "reduce"));
  if (nccl_ != nullptr)
    return nccl_->reduce(input, output, elements, dtype, static_cast<int>(op), root, *cuda_, timeout_, what("reduce"));
  const size_t bytes = elements * dtype_size(dtype);
  const bool mine = rank_ == root;
  // Off the root the host's reduce neither reads nor writes its output.
  return on_host(input, bytes, output, mine ? bytes : 0, [&](const void* in, void* out) {
    return visit_dtype(dtype, [&]<typename T>(std::type_identity<T>) {
      return host().reduce(in_span<T>(in, elements), out_span<T>(out, mine ? elements : 0), root, tag, op);
    });
  });
}

Status DeviceGroup::reduce_scatter(const void* input, void* output, size_t elements, DType dtype, comm::ReduceOp op,
                                   uint64_t tag) {
  RILL_RETURN_IF_ERROR(check(dtype, op, 0, "reduce_scatter"));
  const auto world = static_cast<size_t>(world_);
  if (nccl_ != nullptr) {
    const std::vector<size_t> counts(world, elements);
    return nccl_->reduce_scatter(input, output, counts, dtype, static_cast<int>(op), *cuda_, timeout_,
                                 what("reduce_scatter"));
  }
  const size_t bytes = elements * dtype_size(dtype);
  return on_host(input, world * bytes, output, bytes, [&](const void* in, void* out) {
    return visit_dtype(dtype, [&]<typename T>(std::type_identity<T>) {
      return host().reduce_scatter(in_span<T>(in, world * elements), out_span<T>(out, elements), tag, op);
    });
  });
}

Status DeviceGroup::all_gather(const void* input, void* output, size_t elements, DType dtype, uint64_t tag) {
  const auto world = static_cast<size_t>(world_);
  if (nccl_ != nullptr) {
    const std::vector<size_t> counts(world, elements);
    return nccl_->all_gather(input, output, counts, dtype, *cuda_, timeout_, what("all_gather"));
  }
  const size_t bytes = elements * dtype_size(dtype);
  return on_host(input, bytes, output, world * bytes, [&](const void* in, void* out) {
    return host().all_gather(in_bytes(in, bytes), out_bytes(out, world * bytes), tag);
  });
}

Status DeviceGroup::broadcast(void* buffer, size_t elements, DType dtype, int root, uint64_t tag) {
  RILL_RETURN_IF_ERROR(check(dtype, comm::ReduceOp::kSum, root, "broadcast"));
  if (nccl_ != nullptr) return nccl_->broadcast(buffer, buffer, elements, dtype, root, *cuda_, timeout_, what("broadcast"));
  const size_t bytes = elements * dtype_size(dtype);
  const bool mine = rank_ == root;  // only the root's bytes go to the host
  return on_host(buffer, mine ? bytes : 0, buffer, bytes, [&](const void* in, void* out) {
    if (mine && in != out) std::memcpy(out, in, bytes);
    return host().broadcast(out_bytes(out, bytes), root, tag);
  });
}

Status DeviceGroup::gather(const void* input, void* output, size_t elements, DType dtype, int root, uint64_t tag) {
  RILL_RETURN_IF_ERROR(check(dtype, comm::ReduceOp::kSum, root, "gather"));
  const auto world = static_cast<size_t>(world_);
  const size_t bytes = elements * dtype_size(dtype);
  const bool mine = rank_ == root;
  if (nccl_ != nullptr) {  // every rank's block to the root: an all-to-all of one destination
    std::vector<size_t> sent(world, 0), got(world, mine ? elements : 0);
    sent[static_cast<size_t>(root)] = elements;
    return nccl_->all_to_all(input, sent, output, got, dtype, *cuda_, timeout_, what("gather"));
  }
  return on_host(input, bytes, output, mine ? world * bytes : 0, [&](const void* in, void* out) {
    return host().gather(in_bytes(in, bytes), out_bytes(out, mine ? world * bytes : 0), root, tag);
  });
}

Status DeviceGroup::scatter(const void* input, void* output, size_t elements, DType dtype, int root, uint64_t tag) {
  RILL_RETURN_IF_ERROR(check(dtype, comm::ReduceOp::kSum, root, "scatter"));
  const auto world = static_cast<size_t>(world_);
  const size_t bytes = elements * dtype_size(dtype);
  const bool mine = rank_ == root;
  if (nccl_ != nullptr) {  // the root's blocks to every rank: an all-to-all of one source
    std::vector<size_t> sent(world, mine ? elements : 0), got(world, 0);
    got[static_cast<size_t>(root)] = elements;
    return nccl_->all_to_all(input, sent, output, got, dtype, *cuda_, timeout_, what("scatter"));
  }
  return on_host(input, mine ? world * bytes : 0, output, bytes, [&](const void* in, void* out) {
    return host().scatter(in_bytes(in, mine ? world * bytes : 0), out_bytes(out, bytes), root, tag);
  });
}

Status DeviceGroup::all_to_all(const void* input, void* output, size_t elements, DType dtype, uint64_t tag) {
  const auto world = static_cast<size_t>(world_);
  if (nccl_ != nullptr) {
    const std::vector<size_t> counts(world, elements);
    return nccl_->all_to_all(input, counts, output, counts, dtype, *cuda_, timeout_, what("all_to_all"));
  }
  const size_t bytes = world * elements * dtype_size(dtype);
  return on_host(input, bytes, output, bytes, [&](const void* in, void* out) {
    return host().all_to_all(in_bytes(in, bytes), out_bytes(out, bytes), tag);
  });
}

Status DeviceGroup::send(const void* data, size_t elements, DType dtype, int to, uint64_t tag) {
  RILL_RETURN_IF_ERROR(check(dtype, comm::ReduceOp::kSum, to, "send"));
  if (nccl_ != nullptr) return nccl_->send(data, elements, dtype, to, *cuda_, timeout_, what("send"));
  const size_t bytes = elements * dtype_size(dtype);
  return on_host(data, bytes, nullptr, 0,
                 [&](const void* in, void*) { return host().send(to, in_bytes(in, bytes), tag); });
}

Status DeviceGroup::recv(void* data, size_t elements, DType dtype, int from, uint64_t tag) {
  RILL_RETURN_IF_ERROR(check(dtype, comm::ReduceOp::kSum, from, "recv"));
  if (nccl_ != nullptr) return nccl_->recv(data, elements, dtype, from, *cuda_, timeout_, what("recv"));
  const size_t bytes = elements * dtype_size(dtype);
  return on_host(nullptr, 0, data, bytes, [&](const void*, void* out) { return host().recv(from, out_bytes(out, bytes), tag); });
}

Status DeviceGroup::drain(const char* call) {
  if (!cuda_) return {};
  RILL_ASSIGN_OR_RETURN(const uint64_t ticket, cuda_->record(what(call)));
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    RILL_ASSIGN_OR_RETURN(const bool done, cuda_->done(ticket, what_.c_str()));
    if (done) return {};
    // A peer gone mid-collective: NCCL says so, or the deadline passes;
    // either way the communicator is aborted, which ends the wait.
    Status failed = nccl_ != nullptr ? nccl_->check(what_.c_str()) : Status();
    if (failed.ok() && std::chrono::steady_clock::now() > deadline)
      failed = Status(Code::kDeadlineExceeded,
                      fmt::format("{}: its device's work was not done within {} ms", what_, timeout_.count()));
    if (!failed.ok()) {
      if (nccl_ != nullptr) nccl_->abort();
      return failed;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Status DeviceGroup::barrier(uint64_t tag) {
  RILL_RETURN_IF_ERROR(drain("barrier"));
  return host().barrier(tag);
}

}  // namespace rill
