// device_collective_bench: bandwidth of the device collectives train.nccl
// runs (actor/device_collective_body.h's DeviceCommunicator), its ranks as
// threads of one process, every rank's buffers in its device's memory:
//
//   device_collective_bench [--device cpu|cuda] [--ranks 2] [--op all_reduce]
//                           [--path staged|shared]
//                           [--sizes 4096,65536,1048576,16777216,268435456]
//                           [--trials 5] [--iters N]
//
// cuda, --ranks 1: NCCL's communicator of one rank on GPU 0 (what a call
// costs NCCL and Rill's side of it, with nothing to send); --ranks 2 or 3:
// ranks sharing GPU 0, as agents sharing one GPU are (NCCL refuses them),
// each with a context of its own: --path shared (the default) in the GPU's
// memory (runtime/node/shared_gpu_rank.h, its barriers over in-process
// transports; between agents they cross the data plane), --path staged
// through host memory into one LocalCollective (runtime/node/gpu_rank.h).
// cpu: the LocalCollective on host memory, what train.nccl runs on cpu
// devices.
//
// --op: all_reduce, reduce_scatter, all_gather, all_to_all. The size is
// the whole buffer (the all-reduced tensor, reduce_scatter's input,
// all_gather's output, each of all_to_all's two), as nccl-tests and
// bench/allreduce_bench.cc. For each size:
// warm-up calls (the result checked once), then `trials` trials of `iters`
// calls each (every rank waits for its stream at the end of a trial); a
// trial's time is the slowest rank's over its calls. The table gives each
// call's time (median of the trials, and their min and max) and, as in
// nccl-tests' PERFORMANCE.md:
//   algbw = bytes / time
//   busbw = algbw * 2 (n - 1) / n   (all_reduce; (n - 1) / n for the others;
//                                    n = 1: algbw)
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/nccl_comm.h"
#include "runtime/node/gpu_rank.h"
#include "runtime/node/local_collective.h"
#include "runtime/node/shared_gpu_rank.h"

using namespace rill;

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kTimeout{60000};

struct Args {
  bool cuda = false;
  int ranks = 2;
  CollectiveCall op = CollectiveCall::kAllReduce;
  std::vector<size_t> sizes = {4096, 65536, 1u << 20, 16u << 20, 256u << 20};
  int trials = 5;
  int iters = 0;  // 0: about 1 GiB of buffer per trial, 3..200 calls
  bool shared = true;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "device_collective_bench: %s\nusage: device_collective_bench [--device cpu|cuda] [--ranks N] "
               "[--op all_reduce|reduce_scatter|all_gather|all_to_all] [--path staged|shared] [--sizes B,B,...] [--trials N] "
               "[--iters N]\n",
               why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("no value for " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--device") {
      if (value != "cpu" && value != "cuda") usage("--device is cpu or cuda");
      a.cuda = value == "cuda";
    } else if (flag == "--ranks") {
      a.ranks = std::atoi(value.c_str());
    } else if (flag == "--op") {
      if (value == "all_reduce") a.op = CollectiveCall::kAllReduce;
      else if (value == "reduce_scatter") a.op = CollectiveCall::kReduceScatter;
      else if (value == "all_gather") a.op = CollectiveCall::kAllGather;
      else if (value == "all_to_all") a.op = CollectiveCall::kAllToAll;
      else usage("--op is all_reduce, reduce_scatter, all_gather or all_to_all");
    } else if (flag == "--sizes") {
      a.sizes.clear();
      for (size_t at = 0; at <= value.size();) {
        const size_t comma = std::min(value.find(',', at), value.size());
        a.sizes.push_back(std::strtoull(value.substr(at, comma - at).c_str(), nullptr, 10));
        at = comma + 1;
      }
    } else if (flag == "--path") {
      if (value != "staged" && value != "shared") usage("--path is staged or shared");
      a.shared = value == "shared";
    } else if (flag == "--trials") {
      a.trials = std::atoi(value.c_str());
    } else if (flag == "--iters") {
      a.iters = std::atoi(value.c_str());
    } else {
      usage(("unknown flag " + flag).c_str());
    }
  }
  if (a.ranks < 1 || a.ranks > 8) usage("--ranks is 1 to 8");
  if (a.trials < 1) usage("--trials is at least 1");
  // Whole floats; a reduce-scatter's or all-gather's blocks equal.
  const size_t unit = sizeof(float) * (a.op == CollectiveCall::kAllReduce ? 1 : static_cast<size_t>(a.ranks));
  for (size_t s : a.sizes)
    if (s == 0 || s % unit != 0) usage("each size is a positive multiple of 4 bytes (of 4 x ranks but for all_reduce)");
  return a;
}

void die(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "device_collective_bench: %s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

// One rank: its device's buffers and communicator.
struct Rank {
  std::unique_ptr<CudaContext> cuda;  // null on cpu
  std::unique_ptr<GpuRank> gpu;
  DeviceCommunicator* communicator = nullptr;
  std::vector<std::byte> host_in, host_out;  // cpu
  void* in = nullptr;
  void* out = nullptr;

  void set(const void* values, size_t bytes) {
    if (cuda) die(cuda->copy(in, values, bytes, CopyKind::kHostToDevice, "the input"), "filling the input");
    else std::memcpy(in, values, bytes);
  }
  void get(void* values, size_t bytes) {
    if (cuda) die(cuda->copy(values, out, bytes, CopyKind::kDeviceToHost, "the output"), "reading the output");
    else std::memcpy(values, out, bytes);
  }
  ~Rank() {
    if (cuda) {
      (void)cuda->synchronize("the end");
      cuda->release(in);
      cuda->release(out);
    }
  }
};

// Input and output bytes of one rank for a buffer of `size` bytes.
std::pair<size_t, size_t> ends(CollectiveCall op, size_t size, int ranks) {
  const size_t block = size / static_cast<size_t>(ranks);
  switch (op) {
    case CollectiveCall::kReduceScatter: return {size, block};
    case CollectiveCall::kAllGather: return {block, size};
    default: return {size, size};
  }
}

Status call(Rank& r, CollectiveCall op, size_t size, int ranks, uint64_t tag) {
  const size_t elements = size / sizeof(float);
  const std::vector<size_t> counts(static_cast<size_t>(ranks), elements / static_cast<size_t>(ranks));
  switch (op) {
    case CollectiveCall::kReduceScatter:
      return r.communicator->reduce_scatter(r.in, r.out, counts, DType::kF32, comm::ReduceOp::kSum, tag);
    case CollectiveCall::kAllGather: return r.communicator->all_gather(r.in, r.out, counts, DType::kF32, tag);
    case CollectiveCall::kAllToAll:
      return r.communicator->all_to_all(r.in, counts, r.out, counts, DType::kF32, tag);
    default: {
      const void* inputs[] = {r.in};
      void* outputs[] = {r.out};
      const size_t sizes[] = {elements};
      return r.communicator->all_reduce(inputs, outputs, sizes, DType::kF32, comm::ReduceOp::kSum, tag);
    }
  }
}

double bus_factor(CollectiveCall op, int n) {
  if (n == 1) return 1.0;
  return op == CollectiveCall::kAllReduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  const int n = args.ranks;
  if (args.cuda) die(require_cuda_devices(1, "device_collective_bench"), "--device cuda");
  const size_t largest = *std::max_element(args.sizes.begin(), args.sizes.end());

  // The ranks: NCCL's one, or ranks meeting in one LocalCollective.
  std::vector<std::unique_ptr<Rank>> ranks;
  std::unique_ptr<LocalCollective> local;
  std::vector<std::unique_ptr<NcclComm>> nccl;
  std::vector<std::unique_ptr<comm::Transport>> transports;
  std::vector<std::unique_ptr<comm::Collectives>> among;
  std::vector<std::unique_ptr<SharedGpuRank>> shared;
  if (!args.cuda || n > 1) local = std::make_unique<LocalCollective>(std::vector<int>(static_cast<size_t>(n), 0), 0, n,
                                                                     nullptr, kTimeout);
  for (int i = 0; i < n; ++i) {
    auto r = std::make_unique<Rank>();
    if (args.cuda) {
      auto cuda = CudaContext::create(0);
      die(cuda.status(), "a context on GPU 0");
      r->cuda = std::move(*cuda);
      auto in = r->cuda->allocate(largest, "the input");
      auto out = r->cuda->allocate(largest, "the output");
      die(in.status(), "allocating");
      die(out.status(), "allocating");
      r->in = *in;
      r->out = *out;
      r->gpu = std::make_unique<GpuRank>(i, n, r->cuda.get(), kTimeout);
      r->communicator = r->gpu.get();
    } else {
      r->host_in.resize(largest);
      r->host_out.resize(largest);
      r->in = r->host_in.data();
      r->out = r->host_out.data();
      r->communicator = local->rank(i);
    }
    ranks.push_back(std::move(r));
  }
  const char* path = "host";
  if (args.cuda && n == 1) {
    auto id = nccl_unique_id();
    die(id.status(), "ncclGetUniqueId");
    const int rank_ids[] = {0}, devices[] = {0};
    auto made = nccl_init(*id, 1, rank_ids, devices, kTimeout);
    die(made.status(), "ncclCommInitRank");
    nccl = std::move(*made);
    ranks[0]->gpu->use_nccl(nccl[0].get());
    path = "nccl";
  } else if (args.cuda && args.shared) {
    // Each rank's exchange buffer, mapped by the others (open() meets them
    // all, so every rank opens on a thread of its own).
    transports = comm::make_inproc_transports(n);
    for (int i = 0; i < n; ++i) {
      among.push_back(std::make_unique<comm::Collectives>(*transports[static_cast<size_t>(i)],
                                                          comm::CollectiveOptions{.timeout = kTimeout}));
      shared.push_back(std::make_unique<SharedGpuRank>(i, n, ranks[static_cast<size_t>(i)]->cuda.get(),
                                                       among.back().get()));
    }
    std::vector<StatusOr<bool>> opened(static_cast<size_t>(n), false);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&, i] { opened[static_cast<size_t>(i)] = shared[static_cast<size_t>(i)]->open(largest, 1); });
    for (auto& t : threads) t.join();
    for (int i = 0; i < n; ++i) {
      die(opened[static_cast<size_t>(i)].status(), "opening the shared buffers");
      if (!*opened[static_cast<size_t>(i)]) die(Status(Code::kUnavailable, "a rank could not map another's"), "--path shared");
      ranks[static_cast<size_t>(i)]->gpu->use_shared(shared[static_cast<size_t>(i)].get());
    }
    path = "shared";
  } else if (args.cuda) {
    for (int i = 0; i < n; ++i) ranks[static_cast<size_t>(i)]->gpu->use_staged(local->rank(i));
    path = "staged";
  }
  std::printf("# %s, %s, %d rank(s)%s\n", collective_call_name(args.op), path, n,
              args.cuda ? " on GPU 0" : " in host memory");
  std::printf("%12s %8s %12s %12s %12s %10s %10s\n", "bytes", "calls", "time_us", "min_us", "max_us", "algbw_GB/s",
              "busbw_GB/s");

  uint64_t tag = 2;
  for (const size_t size : args.sizes) {
    const auto [in_bytes, out_bytes] = ends(args.op, size, n);
    // Rank i's input: i + 1 everywhere (small integers: every sum exact);
    // an all-to-all's says where each element came from: 64 i + the
    // sixty-fourth of the buffer it lies in (so a block taken from the
    // wrong rank, or the wrong place in its buffer, shows).
    const bool to_all = args.op == CollectiveCall::kAllToAll;
    const size_t in_elements = in_bytes / sizeof(float);
    auto sent = [&](size_t from, size_t e) { return static_cast<float>(64 * from + e * 64 / in_elements); };
    for (int i = 0; i < n; ++i) {
      std::vector<float> values(in_elements, static_cast<float>(i + 1));
      if (to_all)
        for (size_t e = 0; e < in_elements; ++e) values[e] = sent(static_cast<size_t>(i), e);
      ranks[static_cast<size_t>(i)]->set(values.data(), in_bytes);
    }
    const int iters = args.iters > 0 ? args.iters
                                     : static_cast<int>(std::clamp<size_t>((size_t{1} << 30) / size, 3, 200));
    std::vector<std::vector<double>> seconds(static_cast<size_t>(n));  // per rank, per trial
    std::barrier start(n);
    std::vector<Status> failed(static_cast<size_t>(n));
    const uint64_t size_tag = tag++;  // every call of a size: one tag, as a plan's collective keeps its own
    auto work = [&](int i) {
      Rank& r = *ranks[static_cast<size_t>(i)];
      const uint64_t t = size_tag;
      // A rank that fails leaves the barrier (the others then fail in the
      // collective, at its deadline, rather than wait here for ever).
      auto fail = [&](Status s) {
        if (s.ok()) return false;
        failed[static_cast<size_t>(i)] = s;
        start.arrive_and_drop();
        return true;
      };
      for (int w = 0; w < 3; ++w)
        if (fail(call(r, args.op, size, n, t))) return;
      if (r.cuda && fail(r.cuda->synchronize("warm-up"))) return;
      for (int trial = 0; trial < args.trials; ++trial) {
        start.arrive_and_wait();
        const auto t0 = Clock::now();
        for (int k = 0; k < iters; ++k)
          if (fail(call(r, args.op, size, n, t))) return;
        if (r.cuda && fail(r.cuda->synchronize("a trial"))) return;
        seconds[static_cast<size_t>(i)].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
    };
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) threads.emplace_back(work, i);
    for (auto& th : threads) th.join();
    for (const Status& s : failed) die(s, collective_call_name(args.op));
    // Checked once: the all-reduce's sum n (n + 1) / 2; a reduce-scatter's
    // block of it; an all-gather's block j from rank j (j + 1); an
    // all-to-all's as above.
    std::vector<float> got(out_bytes / sizeof(float));
    for (int i = 0; i < n; ++i) {
      ranks[static_cast<size_t>(i)]->get(got.data(), out_bytes);
      const float sum = static_cast<float>(n * (n + 1) / 2);
      for (size_t e = 0; e < got.size(); e += std::max<size_t>(1, got.size() / 64)) {
        // An all-to-all's element e at rank i: element i * block + e % block of rank e / block's.
        const size_t block = got.size() / static_cast<size_t>(n);
        const float want =
            to_all ? sent(e / block, static_cast<size_t>(i) * block + e % block)
            : args.op == CollectiveCall::kAllGather ? static_cast<float>(e / (got.size() / static_cast<size_t>(n)) + 1)
                                                  : sum;
        if (got[e] != want) {
          std::fprintf(stderr, "device_collective_bench: rank %d element %zu of %zu bytes: %g, want %g\n", i, e, size,
                       static_cast<double>(got[e]), static_cast<double>(want));
          return 1;
        }
      }
    }
    std::vector<double> per_call;  // each trial's slowest rank, per call
    for (int trial = 0; trial < args.trials; ++trial) {
      double slowest = 0;
      for (int i = 0; i < n; ++i)
        slowest = std::max(slowest, seconds[static_cast<size_t>(i)][static_cast<size_t>(trial)]);
      per_call.push_back(slowest / iters);
    }
    std::sort(per_call.begin(), per_call.end());
    const double median = per_call[per_call.size() / 2];
    const double algbw = static_cast<double>(size) / median / 1e9;
    std::printf("%12zu %8d %12.1f %12.1f %12.1f %10.2f %10.2f\n", size, iters, median * 1e6, per_call.front() * 1e6,
                per_call.back() * 1e6, algbw, algbw * bus_factor(args.op, n));
    std::fflush(stdout);
  }
  return 0;
}
