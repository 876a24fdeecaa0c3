#include "runtime/cli/local_cluster.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/cluster_key.h"
#include "comm/default_key.h"
#include "graph/job_file.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/interrupts.h"
#include "runtime/cluster/client.h"

namespace rill::cli {
namespace {

// The nodes' logs: `asked`, or a fresh private folder (mkdtemp: made here,
// 0700, never one another user planted in /tmp).
StatusOr<std::string> logs_folder(const std::string& asked) {
  if (!asked.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(asked, ec);
    return asked;
  }
  std::string pattern = (std::filesystem::temp_directory_path() / "rill-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr)
    return Status(Code::kUnavailable,
                  fmt::format("cannot make a folder {} for the nodes' logs: {}", pattern, std::strerror(errno)));
  return pattern;
}

// A fresh key for this cluster alone (every connection encrypted, nobody
// else let in), in memory that no path names (a memfd): its agents inherit
// it and, with this client, read it as /proc/self/fd/N. No folder a job may
// read holds it, and nothing is left behind, however this process ends.
Status key_the_cluster(bool keyed) {
  if (!keyed) {
    ::unsetenv(comm::kKeyFileEnv);
    ::setenv(comm::kInsecureEnv, "1", 1);  // its agents and this client: no key, not even the default one
    return {};
  }
  ::unsetenv(comm::kInsecureEnv);
  RILL_ASSIGN_OR_RETURN(comm::ClusterKey key, comm::generate_cluster_key());
  RILL_ASSIGN_OR_RETURN(int held, comm::key_in_memory(key));
  ::setenv(comm::kKeyFileEnv, fmt::format("/proc/self/fd/{}", held).c_str(), 1);
  return {};
}

class LocalCluster {
 public:
  LocalCluster(const ClusterRunArgs& args, std::string devices, std::string logdir)
      : args_(args), devices_(std::move(devices)), logdir_(std::move(logdir)) {
    machines_ = local_machines(args.nodes, args.ctrl_port, args.apart);
  }

  void start() {
    for (int r = 0; r < args_.nodes; ++r) agents_.push_back(start_agent(r, false));
  }

  // Waits for the cluster to form; an agent that exits first (a port in
  // use, say) has printed why, and there is no point in waiting for the
  // deadline. 0, or the exit code.
  int wait_formed() {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(args_.join_timeout_s + 5);
    while (std::chrono::steady_clock::now() < give_up) {
      bool stopped = false;
      for (size_t r = 0; r < agents_.size(); ++r) {
        int status = 0;
        if (agents_[r] <= 0 || waitpid(agents_[r], &status, WNOHANG) != agents_[r]) continue;
        agents_[r] = -1;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
        stopped = true;
        if (r > 0) {  // node 0 wrote to our terminal; the others to their logs
          auto log = read_text_file(fmt::format("{}/node-{}.log", logdir_, r));
          if (log.ok()) fmt::print(stderr, "{}", *log);
        }
      }
      if (stopped) {
        fmt::print(stderr, "rill: an agent stopped before the cluster formed\n");
        return 1;
      }
      if (formed()) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    fmt::print(stderr, "rill: the cluster did not form within {} s\n", args_.join_timeout_s + 5);
    return 1;
  }

  // Submits the job (`text`) and follows it; `stopped` becomes the exit
  // code of a job that ended early, as asked. 0, or the exit code.
  int run_job(const std::string& text, int* stopped) {
    auto client = Client::connect(master(), args_.join_timeout_s + 10);
    if (interrupts::count() > 0) return interrupts::exit_code();  // before the job began
    if (!client.ok()) return fail_command(client.status());
    SubmitOptions options;
    options.devices = devices_;
    options.steps = args_.steps;
    options.overrides = args_.overrides;
    options.resume = args_.resume;
    options.max_restarts = args_.max_restarts;
    options.min_nodes = args_.min_nodes;
    options.replica_every = args_.replica_every;
    options.replica_copies = args_.replica_copies;
    options.trace = !args_.trace_path.empty();
    options.interrupts = &interrupts::counter();
    // The job is submitted and followed on a thread of its own; this one,
    // which started the agents (they end with it), watches them.
    auto submitted =
        std::async(std::launch::async, [&] { return (*client)->submit_text(text, args_.job_path, options); });
    int left = args_.max_restarts;
    while (submitted.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) restart_lost(&left);
    int code = finish(submitted.get(), stopped);
    (void)(*client)->shutdown();
    return code;
  }

  // Agents stop on the shutdown; any that does not within 10 s is killed
  // (at once when the run failed: `code` is not 0). The exit code.
  int stop_agents(int code) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (pid_t pid : agents_) {
      int status = 0;
      if (pid <= 0) continue;
      if (code != 0) kill(pid, SIGTERM);
      while (waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          kill(pid, SIGKILL);
          waitpid(pid, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (code == 0 && WIFEXITED(status) && WEXITSTATUS(status) != 0) code = WEXITSTATUS(status);
    }
    if (code != 0 && args_.nodes > 1) fmt::print(stderr, "rill: the other nodes' logs are in {}\n", logdir_);
    return code;
  }

 private:
  std::string master() const { return fmt::format("127.0.0.1:{}", args_.ctrl_port); }

  pid_t start_agent(int r, bool again) {
    std::vector<std::string> argv = {"/proc/self/exe", "agent", "--machines", machines_, "--rank", std::to_string(r),
                                     "--devices", devices_, "--join-timeout", fmt::format("{}", args_.join_timeout_s),
                                     "--stall-timeout", fmt::format("{}", args_.stall_timeout_s),
                                     // Only this process (it alone holds the fresh key) submits: the
                                     // job may read and write wherever its user can.
                                     "--data-root", "/", "--checkpoint-root", "/"};
    if (r == 0) argv.insert(argv.end(), {"--metrics-dir", logdir_});  // job-1.jsonl beside the nodes' logs
    if (r == 0 && !args_.http.empty()) argv.insert(argv.end(), {"--http", args_.http});
    return spawn_process(argv, {}, r == 0 ? "" : fmt::format("{}/node-{}.log", logdir_, r), again,
                         /*own_group=*/true);
  }

  // Whether the master answers and every node is up.
  bool formed() const {
    auto probe = Client::connect(master(), 1.0);
    auto status = probe.ok() ? (*probe)->status() : StatusOr<std::string>(probe.status());
    if (!status.ok()) return false;
    auto j = nlohmann::json::parse(*status, nullptr, false);
    if (j.is_discarded() || !j.contains("nodes")) return false;
    for (const auto& n : j["nodes"])
      if (n["state"].get<std::string>().rfind("up", 0) != 0) return false;
    return true;
  }

  // While the job runs, a non-master agent that dies is started again with
  // the same rank (its log goes on in the same file), and the master takes
  // it back and resumes the job, `left` times at most.
  void restart_lost(int* left) {
    for (int r = 1; r < args_.nodes && *left > 0; ++r) {
      int status = 0;
      if (agents_[r] <= 0 || waitpid(agents_[r], &status, WNOHANG) != agents_[r]) continue;
      agents_[r] = -1;
      if (!failed_exit(status)) continue;
      --*left;
      fmt::print(stderr, "rill: the agent of node {} {}; starting it again ({} restart(s) left)\n", r,
                 WIFSIGNALED(status) ? fmt::format("was killed by signal {}", WTERMSIG(status))
                                     : fmt::format("exited with code {}", WEXITSTATUS(status)),
                 *left);
      agents_[r] = start_agent(r, true);
    }
  }

  // The job's result written where asked; the exit code.
  int finish(StatusOr<SubmitResult> result, int* stopped) const {
    if (!result.ok()) return fail_command(result.status());
    int code = 0;
    if (!args_.result_path.empty())
      if (Status written = write_text_file(args_.result_path, result->result_json); !written.ok())
        code = fail_command(written);
    if (Status traced = write_job_trace(args_.trace_path, *result); !traced.ok()) code = fail_command(traced);
    if (!result->status.ok()) {
      code = fail_command(result->status);
      if (interrupts::count() > 1) code = interrupts::exit_code();  // stopped at once, as asked
    } else if (interrupts::count() > 0) {
      *stopped = interrupts::exit_code();  // stopped early, as asked
    }
    return code;
  }

  const ClusterRunArgs& args_;
  const std::string devices_, logdir_;
  std::string machines_;
  std::vector<pid_t> agents_;
};

}  // namespace

std::string local_machines(int nodes, int ctrl_port, bool apart) {
  std::string machines;
  for (int r = 0; r < nodes; ++r)
    machines += apart ? fmt::format("{}127.0.0.{}:{}", r ? "," : "", r + 1, ctrl_port)
                      : fmt::format("{}127.0.0.1:{}", r ? "," : "", ctrl_port + 2 * r);
  return machines;
}

int run_local_cluster(const ClusterRunArgs& args) {
  auto text = read_job_text(args.job_path);
  if (!text.ok()) return fail_command(text.status());
  // Check the job here, so a bad file never starts a cluster.
  auto job = graph::parse_job_json(*text, args.job_path, args.overrides);
  if (!job.ok()) return fail_command(job.status());
  auto logdir = logs_folder(args.logdir);
  if (!logdir.ok()) return fail_command(logdir.status());
  if (Status keyed = key_the_cluster(args.keyed); !keyed.ok()) return fail_command(keyed);
  LocalCluster cluster(args, args.devices.empty() ? job->train.devices : args.devices, *logdir);
  // Ctrl-C or SIGTERM: the master stops the job at a step boundary on every
  // node (a second time: at once; a third ends this process, and the agents
  // with it).
  interrupts::install(3);
  cluster.start();
  int stopped = 0;  // the job ended early, as asked: the agents end as after a whole one
  int code = cluster.wait_formed();
  if (code == 0) code = cluster.run_job(*text, &stopped);
  code = cluster.stop_agents(code);
  return code != 0 ? code : stopped;
}

}  // namespace rill::cli
