// allreduce_bench: float32 collective bandwidth of rill::comm, N ranks as N
// processes on one machine (loopback by default: the transport's shared
// memory between them; --tcp for ZeroMQ over TCP).
//
//   allreduce_bench [--op all_reduce] [--ranks 2] [--sizes 4096,4194304,67108864] [--warmup 5]
//                   [--iters N] [--chunk-bytes 1048576] [--direct-bytes 65536]
//                   [--address 127.0.0.1] [--port P] [--tcp 1] [--key FILE] [--io-threads N]
//                   [--addresses A0,A1,...] [--rank-prefix-env NAME]
//                   [--machines M0,M1,... [--flat 1]]
//
// --addresses: each rank's address (machines of their own; by default every
// rank is on --address). --rank-prefix-env NAME: rank r > 0 is started under
// the command prefix in the environment variable NAME<r> (the test bed's
// NETBED_NS_ runs it in node r's network namespace: bench/net_bench.sh).
// --machines: each rank's machine (several ranks a machine; with
// --rank-prefix-env, rank r starts under NAME<its machine>): an all_reduce
// then goes within each machine first (CollectiveOptions::machines), or
// with --flat 1 by one ring of all ranks, for comparison
// (bench/tiers_bench.sh).
//
// --key: the ranks hold this cluster key (rill keygen): every message over
// TCP is sealed (AES-256-GCM, comm/data_cipher.h; bench/curve_bench.sh
// compares). Rank 0 makes every rank's session id (which names its
// shared-memory inbox, and with a key keys its links) and hands them to the
// ranks it starts (a rank started by hand needs --sessions, or its local
// peers talk to it over TCP).
//
// --op: all_reduce, all_gather, reduce_scatter, broadcast (from rank 0),
// all_to_all. The size is the whole buffer (all_gather's output,
// reduce_scatter's input, a rank's all_to_all send buffer), as in nccl-tests.
//
// The process starts ranks 1..N-1 as processes of their own (fork and exec,
// as a launcher does, so the kernel places each on the idlest core) and is
// rank 0 itself. For each size: warm-up
// calls (the result is checked once), a barrier, then timed calls. A call's
// time is the slowest rank's; the table gives the median and the 10th/90th
// percentiles. Metrics, as in nccl-tests' PERFORMANCE.md:
//   algbw = bytes / time                    (bytes: size of the tensor)
//   busbw = algbw * 2 (n - 1) / n           (all_reduce: what each link carries;
//                                            comparable across rank counts and
//                                            with MPI; (n - 1) / n for all_gather,
//                                            reduce_scatter and all_to_all, 1 for
//                                            broadcast)
// bench/allreduce_mpi.c prints the same table for MPI_Allreduce, and
// bench/allreduce_vs_mpi.sh runs both side by side.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/cluster_key.h"
#include "comm/data_cipher.h"
#include "comm/collectives.h"

using namespace rill;
using namespace rill::comm;

namespace {

struct Args {
  int ranks = 2;
  std::vector<size_t> sizes = {4096, 4u << 20, 64u << 20};
  int warmup = 5;
  int iters = 0;  // 0: about 2 GiB of traffic per size, 20..1000 calls
  size_t chunk_bytes = 1u << 20;
  size_t direct_bytes = CollectiveOptions{}.direct_bytes;
  std::string address = "127.0.0.1";
  std::vector<std::string> addresses;  // per rank; empty: every rank on `address`
  std::string rank_prefix_env;         // rank r > 0 started under $<this><r>
  int port = 0;   // 0: free ports chosen by the kernel
  std::string op = "all_reduce";
  bool tcp = false;
  std::string key;  // a cluster key file: every TCP message sealed
  int io_threads = 1;  // ZeroMQ I/O threads per rank
  std::string sessions;  // every rank's session id, hex, comma-separated (internal, with as_rank)
  int as_rank = 0;         // > 0: a started rank (internal)
  std::vector<int> ports;  // every rank's (internal, with as_rank)
  std::vector<int> machines;  // every rank's machine; empty: none said
  bool flat = false;          // with machines: one ring all the same
};

std::vector<int> int_list(const std::string& value) {
  std::vector<int> out;
  for (size_t at = 0; at < value.size();) {
    size_t comma = value.find(',', at);
    if (comma == std::string::npos) comma = value.size();
    out.push_back(std::atoi(value.substr(at, comma - at).c_str()));
    at = comma + 1;
  }
  return out;
}

[[noreturn]] void usage(const char* error) {
  std::fprintf(stderr, "allreduce_bench: %s\nusage: allreduce_bench [--ranks N] [--sizes B,B,...] [--warmup N] "
                       "[--iters N] [--chunk-bytes B] [--direct-bytes B] [--address A] [--port P]\n", error);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + flag).c_str());
    std::string value = argv[++i];
    if (flag == "--ranks") args.ranks = std::atoi(value.c_str());
    else if (flag == "--warmup") args.warmup = std::atoi(value.c_str());
    else if (flag == "--iters") args.iters = std::atoi(value.c_str());
    else if (flag == "--chunk-bytes") args.chunk_bytes = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--direct-bytes") args.direct_bytes = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--address") args.address = value;
    else if (flag == "--rank-prefix-env") args.rank_prefix_env = value;
    else if (flag == "--addresses") {
      for (size_t at = 0; at <= value.size();) {
        size_t comma = value.find(',', at);
        if (comma == std::string::npos) comma = value.size();
        args.addresses.push_back(value.substr(at, comma - at));
        at = comma + 1;
      }
    }
    else if (flag == "--port") args.port = std::atoi(value.c_str());
    else if (flag == "--as-rank") args.as_rank = std::atoi(value.c_str());
    else if (flag == "--op") args.op = value;
    else if (flag == "--tcp") args.tcp = value != "0";
    else if (flag == "--key") args.key = value;
    else if (flag == "--io-threads") args.io_threads = std::atoi(value.c_str());
    else if (flag == "--sessions") args.sessions = value;
    else if (flag == "--ports") args.ports = int_list(value);
    else if (flag == "--machines") args.machines = int_list(value);
    else if (flag == "--flat") args.flat = value != "0";
    else if (flag == "--sizes") {
      args.sizes.clear();
      for (size_t at = 0; at < value.size();) {
        size_t comma = value.find(',', at);
        if (comma == std::string::npos) comma = value.size();
        args.sizes.push_back(std::strtoull(value.substr(at, comma - at).c_str(), nullptr, 10));
        at = comma + 1;
      }
    } else {
      usage(("unknown flag " + flag).c_str());
    }
  }
  if (args.op != "all_reduce" && args.op != "all_gather" && args.op != "reduce_scatter" && args.op != "broadcast" &&
      args.op != "all_to_all")
    usage(("unknown --op " + args.op).c_str());
  if (!args.addresses.empty() && static_cast<int>(args.addresses.size()) != args.ranks)
    usage("--addresses must name one address per rank");
  if (!args.machines.empty() && static_cast<int>(args.machines.size()) != args.ranks)
    usage("--machines must name one machine per rank");
  if (args.ranks < 1 || args.warmup < 0 || args.iters < 0 || args.chunk_bytes < 4) usage("bad value");
  for (size_t size : args.sizes) {
    if (size == 0 || size % 4 != 0) usage("sizes must be positive multiples of 4 bytes");
  }
  return args;
}

std::vector<int> free_ports(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof a;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length) != 0) {
      std::perror("allreduce_bench: picking a free port");
      std::exit(1);
    }
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds) close(fd);
  return ports;
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  size_t index = static_cast<size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(index, values.size() - 1)];
}

int fail(int rank, const Status& status) {
  std::fprintf(stderr, "allreduce_bench rank %d: %s\n", rank, status.to_string().c_str());
  return 1;
}

// One call of the collective: `in` holds count floats, `out` as many.
Status run_op(Collectives& c, const std::string& op, std::vector<float>& in, std::vector<float>& out, uint64_t tag) {
  const size_t part = in.size() / static_cast<size_t>(c.world());
  auto bytes = [](std::span<const float> f) { return std::as_bytes(f); };
  auto writable = [](std::span<float> f) { return std::as_writable_bytes(f); };
  if (op == "all_reduce") return c.all_reduce(in, out, tag);
  if (op == "all_gather") return c.all_gather(bytes(std::span(in).first(part)), writable(out), tag);
  if (op == "reduce_scatter") return c.reduce_scatter(in, std::span(out).first(part), tag);
  if (op == "broadcast") return c.broadcast(writable(in), 0, tag);
  return c.all_to_all(bytes(in), writable(out), tag);
}

int run_rank(int rank, const Args& args, const std::vector<Endpoint>& endpoints) {
  ZmqOptions zmq_options;
  zmq_options.shared_memory = !args.tcp;
  zmq_options.io_threads = args.io_threads;
  if (!args.key.empty()) {
    auto key = read_key_file(args.key);
    if (!key.ok()) return fail(rank, key.status());
    zmq_options.key = std::make_shared<const ClusterKey>(*key);
  }
  std::vector<SessionId> sessions;
  for (size_t at = 0; at < args.sessions.size();) {
    size_t comma = std::min(args.sessions.find(',', at), args.sessions.size());
    SessionId id{};
    for (size_t i = 0; i < id.size() && at + 2 * i + 1 < comma; ++i)
      id[i] = static_cast<uint8_t>(std::stoul(args.sessions.substr(at + 2 * i, 2), nullptr, 16));
    sessions.push_back(id);
    at = comma + 1;
  }
  if (!sessions.empty() || zmq_options.key) {
    if (static_cast<int>(sessions.size()) != args.ranks)
      return fail(rank, invalid_argument("--sessions names {} ranks' session ids, not {} (--key needs them)",
                                         sessions.size(), args.ranks));
    zmq_options.session = sessions[static_cast<size_t>(rank)];
  }
  auto transport = make_zmq_transport(rank, endpoints, zmq_options);
  if (!transport.ok()) return fail(rank, transport.status());
  for (int r = 0; r < static_cast<int>(sessions.size()); ++r) (*transport)->set_peer_session(r, sessions[r]);
  CollectiveOptions options;
  options.chunk_bytes = args.chunk_bytes;
  options.direct_bytes = args.direct_bytes;
  options.timeout = std::chrono::milliseconds(120000);
  if (!args.flat) options.machines = args.machines;
  Collectives collectives(**transport, options);
  const int n = args.ranks;
  if (rank == 0) {
    std::string where = args.address;
    if (!args.addresses.empty()) where = fmt::format("{}", fmt::join(args.addresses, ","));
    std::printf("# rill %s, float32 sum, %d ranks, %s %s, %s, chunk %zu B, direct up to %zu B\n", args.op.c_str(), n,
                args.tcp ? "ZeroMQ TCP" : "shared memory (ZeroMQ TCP between machines)", where.c_str(),
                args.key.empty() ? "unsealed" : "sealed", args.chunk_bytes, args.direct_bytes);
    std::printf("# %12s %7s %11s %11s %11s %11s %11s  %s\n", "bytes", "iters", "median_us", "p10_us", "p90_us",
                "algbw_GB/s", "busbw_GB/s", "algorithm");
  }
  uint64_t tag = 1;
  const double factor = args.op == "all_reduce" ? 2.0 * (n - 1) / n
                        : args.op == "broadcast"  ? 1.0
                                                  : static_cast<double>(n - 1) / n;
  for (size_t asked : args.sizes) {
    // A multiple of the ranks, so every rank's part is whole.
    const size_t count = std::max<size_t>(asked / sizeof(float) / n * n, n), bytes = count * sizeof(float);
    std::vector<float> in(count, static_cast<float>(rank + 1)), out(count, 0.0f);
    const int iters = args.iters > 0 ? args.iters
                                     : static_cast<int>(std::clamp<size_t>((size_t{2} << 30) / bytes, 20, 1000));
    for (int i = 0; i < std::max(1, args.warmup); ++i) {
      Status status = run_op(collectives, args.op, in, out, tag);
      if (!status.ok()) return fail(rank, status);
    }
    const float expected = static_cast<float>(n * (n + 1) / 2);
    if (args.op == "all_reduce" && (out.front() != expected || out.back() != expected || out[count / 2] != expected)) {
      return fail(rank, internal_error("wrong all_reduce result {} (expected {})", out[count / 2], expected));
    }
    std::vector<double> seconds(static_cast<size_t>(iters));
    Status status = collectives.barrier(tag + 1);
    if (!status.ok()) return fail(rank, status);
    for (int i = 0; i < iters; ++i) {
      auto start = Clock::now();
      status = run_op(collectives, args.op, in, out, tag);
      seconds[i] = std::chrono::duration<double>(Clock::now() - start).count();
      if (!status.ok()) return fail(rank, status);
    }
    const std::string algorithm = collectives.last_algorithm();
    // Each call's time is its slowest rank's.
    std::vector<double> all(rank == 0 ? seconds.size() * static_cast<size_t>(n) : 0);
    status = collectives.gather(std::as_bytes(std::span<const double>(seconds)),
                                std::as_writable_bytes(std::span<double>(all)), 0, tag + 2);
    if (!status.ok()) return fail(rank, status);
    tag += 3;
    if (rank != 0) continue;
    std::vector<double> slowest(seconds.size(), 0.0);
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < seconds.size(); ++i) slowest[i] = std::max(slowest[i], all[r * seconds.size() + i]);
    }
    const double median = percentile(slowest, 0.5);
    const double algbw = static_cast<double>(bytes) / median / 1e9;
    const double busbw = algbw * factor;
    std::printf("  %12zu %7d %11.2f %11.2f %11.2f %11.3f %11.3f  %s\n", bytes, iters, median * 1e6,
                percentile(slowest, 0.1) * 1e6, percentile(slowest, 0.9) * 1e6, algbw, busbw, algorithm.c_str());
    std::fflush(stdout);
  }
  Status status = collectives.barrier(tag);  // nobody closes while a peer still needs it
  return status.ok() ? 0 : fail(rank, status);
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  if (args.sessions.empty() && args.as_rank == 0) {
    for (int r = 0; r < args.ranks; ++r) {  // made here, handed to the ranks started below
      for (uint8_t byte : new_session_id()) args.sessions += fmt::format("{:02x}", byte);
      if (r + 1 < args.ranks) args.sessions += ',';
    }
  }
  keep_large_buffers_mapped();
  std::vector<int> ports;
  if (!args.ports.empty()) {
    ports = args.ports;
  } else if (args.port > 0) {
    for (int r = 0; r < args.ranks; ++r) ports.push_back(args.port + r);
  } else {
    ports = free_ports(args.ranks);
  }
  std::vector<Endpoint> endpoints;
  for (size_t r = 0; r < ports.size(); ++r)
    endpoints.push_back(Endpoint{args.addresses.empty() ? args.address : args.addresses[r], ports[r]});
  if (args.as_rank > 0) return run_rank(args.as_rank, args, endpoints);
  std::fflush(stdout);
  std::vector<pid_t> children;
  for (int rank = 1; rank < args.ranks; ++rank) {
    pid_t pid = fork();  // before any thread or ZeroMQ context exists
    if (pid < 0) {
      std::perror("allreduce_bench: fork");
      return 1;
    }
    if (pid == 0) {
      // The same flags, the port chosen and this rank's place.
      std::vector<std::string> words(argv, argv + argc);
      std::string list;
      for (int port : ports) {
        if (!list.empty()) list += ',';
        list += std::to_string(port);
      }
      for (const std::string& w : {std::string("--ports"), list, std::string("--as-rank"), std::to_string(rank)})
        words.push_back(w);
      words.push_back("--sessions");
      words.push_back(args.sessions);
      const int place = args.machines.empty() ? rank : args.machines[static_cast<size_t>(rank)];
      const char* prefix =
          args.rank_prefix_env.empty() ? nullptr : std::getenv((args.rank_prefix_env + std::to_string(place)).c_str());
      if (prefix) {  // sh -c 'exec PREFIX "$0" "$@"' EXE ARGS...
        char exe[4096];
        const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) _exit(127);
        exe[n] = 0;
        words[0] = exe;
        words.insert(words.begin(), {"sh", "-c", std::string("exec ") + prefix + " \"$0\" \"$@\""});
      }
      std::vector<char*> exec_argv;
      for (std::string& w : words) exec_argv.push_back(w.data());
      exec_argv.push_back(nullptr);
      if (prefix) execv("/bin/sh", exec_argv.data());
      else execv("/proc/self/exe", exec_argv.data());
      std::perror("allreduce_bench: exec");
      _exit(127);
    }
    children.push_back(pid);
  }
  int result = run_rank(0, args, endpoints);
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) result = 1;
  }
  return result;
}
