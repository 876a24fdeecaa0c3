#include "kernels/cuda/cuda_context.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>
#include <cstdio>
#include <cstring>
#include <deque>
#include <vector>

#include "kernels/cuda/cuda_module.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda_kernels.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

std::atomic<int64_t> g_synchronizes{0};
std::atomic<int64_t> g_graph_replays{0};
// cuBLAS's workspace, given explicitly so that a GEMM captured in a graph
// allocates nothing (cuBLAS's own default on Hopper is as large).
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

cudaMemcpyKind memcpy_kind(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice: return cudaMemcpyHostToDevice;
    case CopyKind::kDeviceToHost: return cudaMemcpyDeviceToHost;
    case CopyKind::kDeviceToDevice: return cudaMemcpyDeviceToDevice;
  }
  return cudaMemcpyDefault;
}
std::atomic<int64_t> g_device_bytes{0};
std::atomic<int64_t> g_device_peak{0};

// CudaContext on the CUDA runtime and cuBLAS (kernels/cuda/cuda_context.h).
class DeviceContext final : public CudaContext {
 public:
  static StatusOr<std::unique_ptr<CudaContext>> create(int device, bool allow_tf32);
  ~DeviceContext() override;

  int device() const override { return device_; }
  void* stream() const override { return stream_; }
  void* cublas() const override { return cublas_; }
  int64_t* bad_label() const override { return bad_label_; }
  double* reduction_partials() const override { return partials_; }
  Status activate(const char* what) override;
  Status synchronize(const char* what) override;
  StatusOr<void*> allocate(size_t bytes, const char* what) override;
  Status memory_info(size_t* free, size_t* total, const char* what) override;
  StatusOr<std::array<uint8_t, 16>> uuid(const char* what) override;
  void release(void* device_memory) override;
  StatusOr<void*> allocate_host(size_t bytes, const char* what) override;
  void release_host(void* host_memory) override;
  Status copy(void* dst, const void* src, size_t bytes, CopyKind kind, const char* what) override;
  Status copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                   CopyKind kind, const char* what) override;
  Status zero(void* dst, size_t bytes, const char* what) override;
  Status copy_beside(void* dst, const void* src, size_t bytes, CopyKind kind, void* after,
                     const char* what) override;
  Status copy_peer(void* dst, const void* src, int src_device, size_t bytes, void* after,
                   const char* what) override;
  StatusOr<void*> create_event(const char* what) override;
  void destroy_event(void* event) override;
  Status mark(void* event, const char* what) override;
  StatusOr<uint64_t> record(const char* what) override;
  StatusOr<bool> done(uint64_t ticket, const char* what) override;
  StatusOr<void*> capture(const std::function<Status()>& enqueue, const char* what) override;
  Status replay(void* graph, const char* what) override;
  void destroy_graph(void* graph) override;

 private:
  struct Events;
  DeviceContext();
  Status bad_label_error(int64_t flag, const char* what);
  Status grow_events(const char* what);
  // Makes the compute stream wait for the copy stream's work so far.
  Status after_copy(const char* what);
  int device_ = 0;
  void* stream_ = nullptr;
  void* copy_stream_ = nullptr;
  void* copied_ = nullptr;  // the last copy_beside's event
  void* cublas_ = nullptr;
  int64_t* bad_label_ = nullptr;
  double* partials_ = nullptr;  // reduction_partials()
  void* workspace_ = nullptr;  // cuBLAS's
  std::unique_ptr<Events> events_;
  std::unordered_map<void*, size_t> allocated_;  // device memory from allocate(), by address
  std::vector<int> peers_;  // devices copy_peer has asked for peer access to
};

}  // namespace

// Events in flight in the order recorded (one stream completes them in that
// order), and the free ones. Each event has a page-locked word that a copy,
// enqueued just before the event, fills with the bad-label flag: when the
// event is complete, the word says whether the work before it raised it.
struct DeviceContext::Events {
  struct Mark {
    uint64_t ticket = 0;
    cudaEvent_t event = nullptr;
    int64_t* flag = nullptr;  // page-locked
  };
  std::deque<Mark> in_flight;
  std::vector<Mark> free;
  std::vector<cudaEvent_t> all;
  std::vector<int64_t*> flag_blocks;  // page-locked, kBlock words each
  uint64_t recorded = 0;              // the last ticket handed out
  uint64_t completed = 0;             // every ticket up to this one is complete
  static constexpr int kBlock = 64;
  static constexpr int kPrepared = 4 * kBlock;  // made with the context
};

DeviceContext::DeviceContext() : events_(std::make_unique<Events>()) {}

Status cuda_status(cudaError_t error, const char* call, const char* what) {
  if (error == cudaSuccess) return {};
  return Status(Code::kInternal, fmt::format("{}: {} failed: {} ({})", what, call, cudaGetErrorString(error),
                                             cudaGetErrorName(error)));
}

Status cublas_status(cublasStatus_t status, const char* call, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return {};
  return Status(Code::kInternal, fmt::format("{}: {} failed: {} ({})", what, call, cublasGetStatusString(status),
                                             cublasGetStatusName(status)));
}

int visible_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not sticky
    return 0;
  }
  return count;
}

StatusOr<std::unique_ptr<CudaContext>> DeviceContext::create(int device, bool allow_tf32) {
  std::unique_ptr<DeviceContext> ctx(new DeviceContext());
  ctx->device_ = device;
  const std::string what = fmt::format("cuda:{}", device);
  const int count = visible_devices();
  if (device < 0 || device >= count)
    return Status(Code::kUnavailable, fmt::format("{}: this machine has {} CUDA device(s)", what, count));
  RILL_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "cudaSetDevice", what.c_str()));
  cudaStream_t stream = nullptr;
  RILL_RETURN_IF_ERROR(
      cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", what.c_str()));
  ctx->stream_ = stream;
  cudaStream_t copy_stream = nullptr;
  RILL_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking),
                                   "cudaStreamCreateWithFlags", what.c_str()));
  ctx->copy_stream_ = copy_stream;
  RILL_ASSIGN_OR_RETURN(ctx->copied_, ctx->create_event(what.c_str()));
  cublasHandle_t handle = nullptr;
  RILL_RETURN_IF_ERROR(cublas_status(cublasCreate(&handle), "cublasCreate", what.c_str()));
  ctx->cublas_ = handle;
  RILL_RETURN_IF_ERROR(cublas_status(cublasSetStream(handle, stream), "cublasSetStream", what.c_str()));
  RILL_ASSIGN_OR_RETURN(ctx->workspace_, ctx->allocate(kCublasWorkspaceBytes, what.c_str()));
  RILL_RETURN_IF_ERROR(cublas_status(cublasSetWorkspace(handle, ctx->workspace_, kCublasWorkspaceBytes),
                                     "cublasSetWorkspace", what.c_str()));
  RILL_RETURN_IF_ERROR(cublas_status(
      cublasSetMathMode(handle, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH), "cublasSetMathMode",
      what.c_str()));
  RILL_ASSIGN_OR_RETURN(void* flag, ctx->allocate(sizeof(int64_t), what.c_str()));
  ctx->bad_label_ = static_cast<int64_t*>(flag);
  RILL_ASSIGN_OR_RETURN(void* partials, ctx->allocate(kReductionBlocks * sizeof(double), what.c_str()));
  ctx->partials_ = static_cast<double*>(partials);
  for (int made = 0; made < Events::kPrepared; made += Events::kBlock) RILL_RETURN_IF_ERROR(ctx->grow_events(what.c_str()));
  return std::unique_ptr<CudaContext>(std::move(ctx));
}

DeviceContext::~DeviceContext() {
  if (stream_) (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (copy_stream_) (void)cudaStreamSynchronize(static_cast<cudaStream_t>(copy_stream_));
  for (cudaEvent_t e : events_->all) (void)cudaEventDestroy(e);
  if (copied_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(copied_));
  if (copy_stream_) (void)cudaStreamDestroy(static_cast<cudaStream_t>(copy_stream_));
  for (int64_t* block : events_->flag_blocks) (void)cudaFreeHost(block);
  release(bad_label_);
  release(partials_);
  if (cublas_) (void)cublasDestroy(static_cast<cublasHandle_t>(cublas_));
  release(workspace_);
  if (stream_) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Status DeviceContext::activate(const char* what) { return cuda_status(cudaSetDevice(device_), "cudaSetDevice", what); }

Status DeviceContext::bad_label_error(int64_t flag, const char* what) {
  RILL_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(bad_label_, 0, sizeof flag, static_cast<cudaStream_t>(stream_)),
                                   "cudaMemsetAsync", what));
  if (flag < 0) return loss_scale_fell(-flag - 1);  // loss_scale_update's
  return invalid_argument("{}: the label or id at position {} is out of range (outside the classes, or the rows "
                          "of the embedding table)",
                          what, flag - 1);
}

Status DeviceContext::synchronize(const char* what) {
  g_synchronizes.fetch_add(1, std::memory_order_relaxed);
  auto stream = static_cast<cudaStream_t>(stream_);
  int64_t flag = 0;
  RILL_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(&flag, bad_label_, sizeof flag, cudaMemcpyDeviceToHost, stream),
                                   "cudaMemcpyAsync", what));
  RILL_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize", what));
  // Every event recorded so far is complete too.
  while (!events_->in_flight.empty()) {
    events_->free.push_back(events_->in_flight.front());
    events_->in_flight.pop_front();
  }
  events_->completed = events_->recorded;
  if (flag != 0) return bad_label_error(flag, what);
  return {};
}

// kBlock more events, each with its page-locked flag word.
Status DeviceContext::grow_events(const char* what) {
  Events& ev = *events_;
  int64_t* block = nullptr;
  RILL_RETURN_IF_ERROR(cuda_status(
      cudaHostAlloc(reinterpret_cast<void**>(&block), Events::kBlock * sizeof(int64_t), cudaHostAllocDefault),
      "cudaHostAlloc", what));
  ev.flag_blocks.push_back(block);
  for (int i = 0; i < Events::kBlock; ++i) {
    cudaEvent_t e = nullptr;
    RILL_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate", what));
    ev.all.push_back(e);
    block[i] = 0;
    ev.free.push_back({0, e, block + i});
  }
  return {};
}

StatusOr<uint64_t> DeviceContext::record(const char* what) {
  Events& ev = *events_;
  // Made at set-up for kPrepared marks in flight; past that it grows (page-
  // locked allocation may wait for the device: once, not in steady state).
  if (ev.free.empty()) RILL_RETURN_IF_ERROR(grow_events(what));
  Events::Mark mark = ev.free.back();
  auto stream = static_cast<cudaStream_t>(stream_);
  RILL_RETURN_IF_ERROR(cuda_status(
      cudaMemcpyAsync(mark.flag, bad_label_, sizeof(int64_t), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync", what));
  RILL_RETURN_IF_ERROR(cuda_status(cudaEventRecord(mark.event, stream), "cudaEventRecord", what));
  ev.free.pop_back();
  mark.ticket = ++ev.recorded;
  ev.in_flight.push_back(mark);
  return mark.ticket;
}

StatusOr<bool> DeviceContext::done(uint64_t ticket, const char* what) {
  Events& ev = *events_;
  while (ev.completed < ticket) {
    if (ev.in_flight.empty()) return internal_error("{}: event {} was never recorded (last {})", what, ticket, ev.recorded);
    Events::Mark& mark = ev.in_flight.front();
    const cudaError_t state = cudaEventQuery(mark.event);
    if (state == cudaErrorNotReady) return false;
    RILL_RETURN_IF_ERROR(cuda_status(state, "cudaEventQuery", what));
    ev.completed = mark.ticket;
    const int64_t flag = *mark.flag;
    ev.free.push_back(mark);
    ev.in_flight.pop_front();
    if (flag != 0) return bad_label_error(flag, what);
  }
  return true;
}

StatusOr<void*> DeviceContext::capture(const std::function<Status()>& enqueue, const char* what) {
  auto stream = static_cast<cudaStream_t>(stream_);
  // Thread-local: a call of this thread that a capture cannot hold (a
  // synchronous copy, a wait) ends it invalid rather than running.
  RILL_RETURN_IF_ERROR(cuda_status(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                                   "cudaStreamBeginCapture", what));
  Status enqueued = enqueue();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (ended != cudaSuccess || !enqueued.ok()) {
    if (graph) (void)cudaGraphDestroy(graph);
    // A call the capture could not hold fails (the kernel's error) and ends
    // the capture invalid: that is no error of the work's, which then runs
    // directly. Capture errors are not sticky: the stream is out of capture.
    if (ended == cudaErrorStreamCaptureInvalidated || ended == cudaErrorStreamCaptureUnsupported ||
        ended == cudaErrorStreamCaptureUnjoined) {
      (void)cudaGetLastError();
      return Status(Code::kFailedPrecondition, fmt::format("{}: its work cannot be captured in a graph ({})", what,
                                                           cudaGetErrorName(ended)));
    }
    if (!enqueued.ok()) return enqueued;
    return cuda_status(ended, "cudaStreamEndCapture", what);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  RILL_RETURN_IF_ERROR(cuda_status(made, "cudaGraphInstantiate", what));
  return static_cast<void*>(exec);
}

Status DeviceContext::replay(void* graph, const char* what) {
  g_graph_replays.fetch_add(1, std::memory_order_relaxed);
  return cuda_status(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), static_cast<cudaStream_t>(stream_)),
                     "cudaGraphLaunch", what);
}

void DeviceContext::destroy_graph(void* graph) {
  if (graph) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
}

StatusOr<void*> DeviceContext::allocate(size_t bytes, const char* what) {
  RILL_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice", what));
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return Status(Code::kUnavailable, fmt::format("{}: out of device memory for {} bytes on cuda:{}", what, bytes, device_));
  }
  RILL_RETURN_IF_ERROR(cuda_status(e, "cudaMalloc", what));
  // Zeroed on the context's stream, and waited for: this context's streams
  // are non-blocking, so a cudaMemset on the legacy default stream would
  // not be ordered before their work, and memory allocated mid-run (a
  // collective's scratch, grown) could be read or written before it is
  // zeroed. The wait also orders the zeroing before the copy stream's work.
  // Nothing allocates inside a graph capture (which holds kernels only).
  Status zeroed = cuda_status(cudaMemsetAsync(p, 0, bytes, static_cast<cudaStream_t>(stream_)), "cudaMemsetAsync", what);
  if (zeroed.ok())
    zeroed = cuda_status(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize", what);
  if (!zeroed.ok()) {
    (void)cudaFree(p);
    return zeroed;
  }
  allocated_[p] = bytes;
  const int64_t now = g_device_bytes.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  int64_t peak = g_device_peak.load();
  while (now > peak && !g_device_peak.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void DeviceContext::release(void* device_memory) {
  if (!device_memory) return;
  if (auto it = allocated_.find(device_memory); it != allocated_.end()) {
    g_device_bytes.fetch_sub(static_cast<int64_t>(it->second));
    allocated_.erase(it);
  }
  (void)cudaFree(device_memory);
}

Status DeviceContext::copy_beside(void* dst, const void* src, size_t bytes, CopyKind kind, void* after,
                                const char* what) {
  auto copy_stream = static_cast<cudaStream_t>(copy_stream_);
  if (after)
    RILL_RETURN_IF_ERROR(cuda_status(cudaStreamWaitEvent(copy_stream, static_cast<cudaEvent_t>(after), 0),
                                     "cudaStreamWaitEvent", what));
  if (bytes > 0)
    RILL_RETURN_IF_ERROR(
        cuda_status(cudaMemcpyAsync(dst, src, bytes, memcpy_kind(kind), copy_stream), "cudaMemcpyAsync", what));
  return after_copy(what);
}

Status DeviceContext::copy_peer(void* dst, const void* src, int src_device, size_t bytes, void* after,
                              const char* what) {
  if (src_device != device_ && std::find(peers_.begin(), peers_.end(), src_device) == peers_.end()) {
    // Once per source GPU. Without peer access (GPUs on different PCIe
    // roots, or none to reach) cudaMemcpyPeerAsync still copies, through
    // host memory.
    peers_.push_back(src_device);
    int can = 0;
    RILL_RETURN_IF_ERROR(cuda_status(cudaDeviceCanAccessPeer(&can, device_, src_device), "cudaDeviceCanAccessPeer",
                                     what));
    if (can) {
      // Already enabled (another context of this process), or refused (past
      // the 8 peers a GPU may map): the copy goes on, staged where refused.
      const cudaError_t enabled = cudaDeviceEnablePeerAccess(src_device, 0);
      if (enabled != cudaSuccess) (void)cudaGetLastError();  // neither is sticky
      if (enabled != cudaSuccess && enabled != cudaErrorPeerAccessAlreadyEnabled)
        std::fprintf(stderr, "%s: peer access from cuda:%d to cuda:%d refused (%s): copies go through the host\n",
                     what, device_, src_device, cudaGetErrorString(enabled));
    }
  }
  auto copy_stream = static_cast<cudaStream_t>(copy_stream_);
  if (after)
    RILL_RETURN_IF_ERROR(cuda_status(cudaStreamWaitEvent(copy_stream, static_cast<cudaEvent_t>(after), 0),
                                     "cudaStreamWaitEvent", what));
  if (bytes > 0)
    RILL_RETURN_IF_ERROR(cuda_status(cudaMemcpyPeerAsync(dst, device_, src, src_device, bytes, copy_stream),
                                     "cudaMemcpyPeerAsync", what));
  return after_copy(what);
}

Status DeviceContext::after_copy(const char* what) {
  auto copy_stream = static_cast<cudaStream_t>(copy_stream_);
  auto copied = static_cast<cudaEvent_t>(copied_);
  RILL_RETURN_IF_ERROR(cuda_status(cudaEventRecord(copied, copy_stream), "cudaEventRecord", what));
  return cuda_status(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), copied, 0), "cudaStreamWaitEvent", what);
}

StatusOr<void*> DeviceContext::create_event(const char* what) {
  RILL_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice", what));
  cudaEvent_t e = nullptr;
  RILL_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate", what));
  return static_cast<void*>(e);
}

void DeviceContext::destroy_event(void* event) {
  if (event) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

Status DeviceContext::mark(void* event, const char* what) {
  return cuda_status(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream_)),
                     "cudaEventRecord", what);
}

Status DeviceContext::memory_info(size_t* free, size_t* total, const char* what) {
  RILL_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice", what));
  return cuda_status(cudaMemGetInfo(free, total), "cudaMemGetInfo", what);
}

StatusOr<std::array<uint8_t, 16>> DeviceContext::uuid(const char* what) {
  cudaDeviceProp properties{};
  RILL_RETURN_IF_ERROR(cuda_status(cudaGetDeviceProperties(&properties, device_), "cudaGetDeviceProperties", what));
  std::array<uint8_t, 16> out{};
  static_assert(sizeof(properties.uuid.bytes) == 16);
  std::memcpy(out.data(), properties.uuid.bytes, out.size());
  return out;
}

StatusOr<void*> DeviceContext::allocate_host(size_t bytes, const char* what) {
  RILL_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice", what));
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return Status(Code::kUnavailable, fmt::format("{}: out of page-locked host memory for {} bytes", what, bytes));
  }
  RILL_RETURN_IF_ERROR(cuda_status(e, "cudaHostAlloc", what));
  std::memset(p, 0, bytes);
  return p;
}

void DeviceContext::release_host(void* host_memory) {
  if (host_memory) (void)cudaFreeHost(host_memory);
}

Status DeviceContext::copy(void* dst, const void* src, size_t bytes, CopyKind kind, const char* what) {
  if (bytes == 0) return {};
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, memcpy_kind(kind), static_cast<cudaStream_t>(stream_)),
                     "cudaMemcpyAsync", what);
}

Status DeviceContext::copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                                size_t rows, CopyKind kind, const char* what) {
  if (width == 0 || rows == 0) return {};
  // One row, or rows back to back on both sides: one plain copy (a 2-D
  // copy refuses a pitch past the device's memPitch, about 2 GiB).
  if (rows == 1 || (src_pitch == width && dst_pitch == width))
    return cuda_status(cudaMemcpyAsync(dst, src, width * rows, memcpy_kind(kind), static_cast<cudaStream_t>(stream_)),
                       "cudaMemcpyAsync", what);
  return cuda_status(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, memcpy_kind(kind),
                                       static_cast<cudaStream_t>(stream_)),
                     "cudaMemcpy2DAsync", what);
}

Status DeviceContext::zero(void* dst, size_t bytes, const char* what) {
  if (bytes == 0) return {};
  return cuda_status(cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(stream_)), "cudaMemsetAsync", what);
}

}  // namespace rill

extern "C" const rill::CudaModule* rill_cuda_module() {
  static const rill::CudaModule module = [] {
    rill::CudaModule m;
    m.device_count = rill::visible_devices;
    m.create_context = rill::DeviceContext::create;
    m.synchronizes = [] { return rill::g_synchronizes.load(std::memory_order_relaxed); };
    m.graph_replays = [] { return rill::g_graph_replays.load(std::memory_order_relaxed); };
    m.device_bytes_peak = [] { return rill::g_device_peak.load(std::memory_order_relaxed); };
    m.shared_allocate = rill::shared_gpu::allocate;
    m.shared_free = rill::shared_gpu::free;
    m.shared_open = rill::shared_gpu::open;
    m.shared_close = rill::shared_gpu::close;
    m.shared_reduce = rill::shared_gpu::reduce;
#ifdef RILL_WITH_NCCL
    m.nccl_unique_id = rill::nccl::make_id;
    m.nccl_init = rill::nccl::init;
    m.nccl_abort = rill::nccl::abort;
#endif
    return m;
  }();
  return &module;
}
