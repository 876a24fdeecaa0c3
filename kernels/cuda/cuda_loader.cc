// Loads the CUDA module (kernels/cuda/cuda_module.h) on first use and
// forwards to it: CudaContext::create, cuda_device_count, find_cuda_kernel
// (each op's kernel, found by the name its OpDef gives when the module
// loads) and the process-wide counts. The module is looked for beside the program
// and in the build's kernels/ folder (from build/ and from the test
// programs under build/tests/), where `meson install` put it, or where
// RILL_CUDA_MODULE names it (candidates() below). Thread-safe: loaded once.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_module.h"
#include "kernels/cuda/nccl_comm.h"
#include "kernels/cuda/shared_gpu.h"
#include "kernels/cuda_kernels.h"

namespace rill {
namespace {

constexpr const char* kModuleName = "librill_cuda.so";

// Set once the module is loaded (the counts read it without loading it);
// g_why says why not when the load failed.
std::atomic<const CudaModule*> g_module{nullptr};
std::string g_why;  // written once, under the once flag
// Each op's CUDA kernel, in all_ops() order (nullptr: an initializer),
// found in the module by OpDef::cuda when it loads; written once, before
// g_module is.
std::vector<KernelFn> g_kernels;

// The module's kernel for every op that names one, or the first op whose
// kernel it lacks (a module from another build of the ops).
StatusOr<std::vector<KernelFn>> find_kernels(void* handle) {
  std::vector<KernelFn> kernels;
  for (const OpDef* def : all_ops()) {
    KernelFn kernel = nullptr;
    if (def->cuda != nullptr) {
      const std::string symbol = std::string("rill_cuda_") + def->cuda;
      kernel = reinterpret_cast<KernelFn>(dlsym(handle, symbol.c_str()));
      if (kernel == nullptr) return not_found("op '{}' names CUDA kernel {}, which the module lacks", def->type, symbol);
    }
    kernels.push_back(kernel);
  }
  return kernels;
}

// Where the module may be, in order: named by RILL_CUDA_MODULE; beside the
// program; in kernels/ beside it (build/rill); in ../kernels/ (the
// benchmarks under build/bench/); in ../../kernels/ (the test programs
// under build/tests/SUITE/); where `meson install` put it.
std::vector<std::filesystem::path> candidates() {
  std::vector<std::filesystem::path> out;
  if (const char* named = std::getenv("RILL_CUDA_MODULE"); named && *named) out.emplace_back(named);
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::filesystem::path dir = exe.parent_path();
    out.push_back(dir / kModuleName);
    out.push_back(dir / "kernels" / kModuleName);
    out.push_back(dir.parent_path() / "kernels" / kModuleName);
    out.push_back(dir.parent_path().parent_path() / "kernels" / kModuleName);
  }
#ifdef RILL_CUDA_INSTALL_DIR
  out.push_back(std::filesystem::path(RILL_CUDA_INSTALL_DIR) / kModuleName);
#endif
  return out;
}

// A folder anyone may write to (without the sticky bit's protection either)
// is no place to load code from.
bool writable_by_anyone(const std::filesystem::path& file) {
  struct stat st {};
  return ::stat(file.parent_path().c_str(), &st) == 0 && (st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0;
}

// The module, loaded on the first call; null when it cannot be (g_why).
const CudaModule* module() {
  static std::once_flag once;
  std::call_once(once, [] {
#if !RILL_WITH_CUDA
    g_why = "this build of Rill has no CUDA support";
#else
    std::string tried;
    for (const std::filesystem::path& path : candidates()) {
      std::error_code error;
      if (!std::filesystem::exists(path, error)) continue;
      if (writable_by_anyone(path)) {
        tried += fmt::format("; {}: its folder is writable by anyone, not loaded", path.string());
        continue;
      }
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        const char* why = dlerror();
        tried += fmt::format("; {}: {}", path.string(), why ? why : "dlopen failed");
        continue;
      }
      using Entry = const CudaModule* (*)();
      auto entry = reinterpret_cast<Entry>(dlsym(handle, "rill_cuda_module"));
      const CudaModule* loaded = entry ? entry() : nullptr;
      if (loaded == nullptr || loaded->abi != cuda_module_abi()) {
        tried += fmt::format("; {}: not this build's CUDA module", path.string());
        continue;
      }
      auto kernels = find_kernels(handle);
      if (!kernels.ok()) {
        tried += fmt::format("; {}: {}", path.string(), kernels.status().message());
        continue;
      }
      g_kernels = std::move(*kernels);
      g_module.store(loaded, std::memory_order_release);  // kept loaded for the life of the process
      return;
    }
    g_why = tried.empty() ? fmt::format("the CUDA module {} is not beside the program (or RILL_CUDA_MODULE)",
                                             kModuleName)
                               : "the CUDA module could not be loaded" + tried;
#endif
  });
  return g_module.load(std::memory_order_acquire);
}

}  // namespace

StatusOr<std::unique_ptr<CudaContext>> CudaContext::create(int device, bool allow_tf32) {
  const CudaModule* m = module();
  if (m == nullptr) return Status(Code::kUnavailable, fmt::format("cuda:{}: {}", device, g_why));
  return m->create_context(device, allow_tf32);
}

int cuda_device_count() {
  const CudaModule* m = module();
  return m ? m->device_count() : 0;
}

KernelFn find_cuda_kernel(std::string_view type) {
  if (module() == nullptr) return nullptr;
  const auto ops = all_ops();
  for (size_t i = 0; i < ops.size(); ++i)
    if (type == ops[i]->type) return g_kernels[i];
  return nullptr;
}

std::string cuda_unavailable_reason() { return module() ? std::string() : g_why; }

namespace {

// Whether the module's NCCL can be used, asked of it once: OK, or why not.
Status nccl_usable() {
  static const Status usable = [] {
    const CudaModule* m = module();
    if (m == nullptr) return Status(Code::kUnavailable, fmt::format("NCCL: {}", g_why));
    if (m->nccl_unique_id == nullptr || m->nccl_init == nullptr)
      return Status(Code::kUnavailable,
                    "NCCL: this build's CUDA module has none (libnccl was not found when it was built)");
    return Status::ok_status();
  }();
  return usable;
}

}  // namespace

bool nccl_available() { return nccl_usable().ok(); }

std::string nccl_unavailable_reason() { return nccl_usable().message(); }

std::string no_nccl_here(std::string_view who) {
  const Status here = nccl_usable();
  return here.ok() ? fmt::format("{} has no NCCL it can use", who)
                   : fmt::format("{} has no NCCL it can use (here: {})", who, here.message());
}

StatusOr<NcclComm::Id> nccl_unique_id() {
  RILL_RETURN_IF_ERROR(nccl_usable());
  return module()->nccl_unique_id();
}

StatusOr<std::vector<std::unique_ptr<NcclComm>>> nccl_init(const NcclComm::Id& id, int world,
                                                          std::span<const int> ranks, std::span<const int> devices,
                                                          std::chrono::milliseconds timeout,
                                                          const std::atomic<bool>* cancelled) {
  RILL_RETURN_IF_ERROR(nccl_usable());
  return module()->nccl_init(id, world, ranks, devices, timeout, cancelled);
}

StatusOr<SharedBuffer> shared_gpu_allocate(int device, size_t bytes) {
  const CudaModule* m = module();
  if (m == nullptr) return Status(Code::kUnavailable, fmt::format("a shared GPU buffer: {}", g_why));
  return m->shared_allocate(device, bytes);
}

void shared_gpu_free(int device, void* data) {
  if (data == nullptr) return;
  if (const CudaModule* m = module(); m != nullptr) m->shared_free(device, data);
}

StatusOr<void*> shared_gpu_open(int device, const IpcHandle& handle) {
  const CudaModule* m = module();
  if (m == nullptr) return Status(Code::kUnavailable, fmt::format("a shared GPU buffer: {}", g_why));
  return m->shared_open(device, handle);
}

void shared_gpu_close(int device, void* mapped) {
  if (mapped == nullptr) return;
  if (const CudaModule* m = module(); m != nullptr) m->shared_close(device, mapped);
}

Status shared_gpu_reduce(CudaContext& cuda, std::span<const void* const> sources, void* dst, size_t elements,
                         DType dtype, int op, const char* what) {
  const CudaModule* m = module();
  if (m == nullptr) return Status(Code::kUnavailable, fmt::format("combining shared GPU buffers: {}", g_why));
  return m->shared_reduce(cuda, sources, dst, elements, dtype, op, what);
}

void nccl_abort(std::span<NcclComm* const> comms) {
  // None exist without the module's NCCL (and asking for none loads nothing).
  if (comms.empty()) return;
  const CudaModule* m = module();
  if (m != nullptr && m->nccl_abort != nullptr) m->nccl_abort(comms);
}

// The count is the module's: a process that has not loaded it (a CPU-only
// run) has none, and asking does not load it.
int64_t CudaContext::synchronizes() {
  const CudaModule* m = g_module.load(std::memory_order_acquire);
  return m ? m->synchronizes() : 0;
}

int64_t CudaContext::graph_replays() {
  const CudaModule* m = g_module.load(std::memory_order_acquire);
  return m ? m->graph_replays() : 0;
}

int64_t CudaContext::device_bytes_peak() {
  const CudaModule* m = g_module.load(std::memory_order_acquire);
  return m ? m->device_bytes_peak() : 0;
}

}  // namespace rill
