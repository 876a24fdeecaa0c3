// CudaContext: what work on one GPU needs: the stream that work is enqueued
// on, the cuBLAS handle bound to it, device and page-locked host memory,
// copies, events that say when the work enqueued so far is complete, and a
// device flag kernels raise on bad data (a label out of range), read when
// the stream's work is known complete. One per device thread; used by that
// thread only (the process-wide counts, any thread).
//
// The header names no CUDA type, so every part of Rill can hold one. CUDA
// lives in a module of its own (librill_cuda.so, kernels/cuda/cuda_module.h:
// the contexts and every op's CUDA kernel), loaded when a process first
// asks for a GPU (create(), cuda_device_count(), find_cuda_kernel()), so a
// process that never does maps no CUDA library. Where there is no module (a
// build without CUDA) or it cannot load, create() fails with the reason and
// cuda_device_count() is 0. CUDA and cuBLAS errors become Rill errors naming
// the call and what it was for.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"

namespace rill {

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

class CudaContext {
 public:
  // allow_tf32: let cuBLAS round matmul inputs to TF32 on tensor cores (about
  // 1e-3 relative error, several times faster); off, results match the CPU's
  // float GEMM within float rounding.
  static StatusOr<std::unique_ptr<CudaContext>> create(int device, bool allow_tf32 = false);
  virtual ~CudaContext() = default;
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  virtual int device() const = 0;
  virtual void* stream() const = 0;  // a cudaStream_t
  virtual void* cublas() const = 0;  // a cublasHandle_t
  // Device memory: 0, or 1 + the position of the first bad label (or
  // embedding id) a kernel met, or -(1 + step) where a loss scale fell
  // below 1 (loss_scale_update).
  virtual int64_t* bad_label() const = 0;

  // Device memory for kReductionBlocks partial sums (doubles): a reduction
  // over many blocks writes one per block, then a second kernel sums them
  // in a fixed order, so the result is the same bits every time. Kernels
  // run in the stream's order, so one area serves every kernel of it.
  static constexpr int kReductionBlocks = 1024;
  virtual double* reduction_partials() const = 0;

  // Makes this context's device current on the calling thread.
  virtual Status activate(const char* what) = 0;
  // Waits for the stream, then reports a raised bad-label flag (and clears it).
  // Off the hot path only (set-up, checkpoints, the end of a run): each call
  // is counted (synchronizes()).
  virtual Status synchronize(const char* what) = 0;
  virtual StatusOr<void*> allocate(size_t bytes, const char* what) = 0;  // device memory, zeroed
  // The device's free and total memory now.
  virtual Status memory_info(size_t* free, size_t* total, const char* what) = 0;
  // The GPU's UUID: two processes' contexts on one physical GPU have the same.
  virtual StatusOr<std::array<uint8_t, 16>> uuid(const char* what) = 0;
  virtual void release(void* device_memory) = 0;
  // Page-locked host memory, zeroed: copies between it and the device run
  // asynchronously (from pageable memory the driver stages them).
  virtual StatusOr<void*> allocate_host(size_t bytes, const char* what) = 0;
  virtual void release_host(void* host_memory) = 0;
  // Enqueues a copy on the stream (host memory may be pageable: then the
  // copy completes before it returns).
  virtual Status copy(void* dst, const void* src, size_t bytes, CopyKind kind, const char* what) = 0;
  // `rows` rows of `width` bytes, `src_pitch` bytes apart, to rows
  // `dst_pitch` apart (a block of columns packed or unpacked), enqueued
  // like copy().
  virtual Status copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                           CopyKind kind, const char* what) = 0;
  // Zeroes `bytes` of device memory at `dst`, enqueued like copy().
  virtual Status zero(void* dst, size_t bytes, const char* what) = 0;

  // The copy stream: copies between host and device beside the compute
  // stream's kernels. copy_beside() runs the copy on it after `after` (an
  // event recorded on the compute stream; null: after nothing) and makes
  // the compute stream's later work wait for the copy, so what reads the
  // copy, and every event record() marks later, comes after it.
  virtual Status copy_beside(void* dst, const void* src, size_t bytes, CopyKind kind, void* after,
                             const char* what) = 0;
  // The same from another GPU of this process (`src` in the memory of CUDA
  // device `src_device`) into this one's: peer to peer over NVLink or PCIe
  // where the two GPUs can reach each other (peer access enabled on first
  // use), else staged by the driver. `src` must be complete when called.
  virtual Status copy_peer(void* dst, const void* src, int src_device, size_t bytes, void* after,
                           const char* what) = 0;
  // An event (a cudaEvent_t) to mark the compute stream with.
  virtual StatusOr<void*> create_event(const char* what) = 0;
  virtual void destroy_event(void* event) = 0;
  // Records `event` on the compute stream: the work enqueued so far.
  virtual Status mark(void* event, const char* what) = 0;

  // Completion by events, never by waiting. record() marks the work enqueued
  // on the stream so far and returns its ticket (tickets count up from 1);
  // done() says, without waiting, whether the work up to that ticket is
  // complete, and then reports a bad-label flag that work raised. Events are
  // pooled: steady state creates none.
  virtual StatusOr<uint64_t> record(const char* what) = 0;
  virtual StatusOr<bool> done(uint64_t ticket, const char* what) = 0;

  // Graphs of acts. capture() runs `enqueue` (which puts work on the
  // compute stream: an act's kernels) under stream capture, so nothing runs,
  // and returns the work as an instantiated graph; replay() enqueues it on
  // the compute stream. Replaying costs the host one launch (about 2 us on
  // an H100) where the work launched itself costs one per kernel (4-5 us)
  // and 14 us for a cuBLAS GEMM. A graph replays the same kernels with the
  // same arguments: only work whose arguments do not change between acts
  // may be captured (actor/compute_body.cc keeps one per set of slots).
  // capture() fails with kFailedPrecondition where `enqueue` did something a
  // capture cannot hold (then run it directly), with its own error where
  // `enqueue` failed.
  virtual StatusOr<void*> capture(const std::function<Status()>& enqueue, const char* what) = 0;
  virtual Status replay(void* graph, const char* what) = 0;
  virtual void destroy_graph(void* graph) = 0;

  // How many times any context of this process has waited for a stream
  // (synchronize): a run's steady state adds none. 0 before the module loads.
  static int64_t synchronizes();
  // How many graphs any context of this process has replayed.
  static int64_t graph_replays();
  // The most device memory this process held through allocate() at once
  // (every context, any thread).
  static int64_t device_bytes_peak();

 protected:
  CudaContext() = default;
};

// Device memory owned by a unique_ptr: released through its context.
struct DeviceFree {
  CudaContext* cuda = nullptr;
  void operator()(void* p) const {
    if (cuda) cuda->release(p);
  }
};
using DeviceBuffer = std::unique_ptr<void, DeviceFree>;

// An event owned by a unique_ptr: destroyed through its context.
struct EventFree {
  CudaContext* cuda = nullptr;
  void operator()(void* e) const {
    if (cuda) cuda->destroy_event(e);
  }
};
using DeviceEvent = std::unique_ptr<void, EventFree>;

// A captured graph owned by a unique_ptr: destroyed through its context.
struct GraphFree {
  CudaContext* cuda = nullptr;
  void operator()(void* g) const {
    if (cuda) cuda->destroy_graph(g);
  }
};

// How many CUDA devices this process can use: 0 where there is no GPU or no
// driver, and in a build without CUDA (never an error).
int cuda_device_count();

// Why this process can use no GPU at all: the CUDA module is missing or
// would not load (with why), or the build has no CUDA; "" once it loaded.
std::string cuda_unavailable_reason();

// OK when this machine has at least `count` CUDA devices; else an error
// naming what was asked for ("cuda:2") and what there is (and, with none,
// why, when the CUDA module could not be loaded).
inline Status require_cuda_devices(int count, const std::string& where) {
  const int have = cuda_device_count();
  if (have >= count) return {};
  const std::string why = have == 0 ? cuda_unavailable_reason() : std::string();
  return Status(Code::kUnavailable, fmt::format("{}: cuda:{} asks for {} GPU(s), but this machine has {} CUDA device(s){}",
                                                where, count, count, have, why.empty() ? "" : " (" + why + ")"));
}

}  // namespace rill
