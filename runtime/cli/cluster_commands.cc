#include "runtime/cli/cluster_commands.h"

#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "base/file_access.h"
#include "comm/cluster_key.h"
#include "comm/default_key.h"
#include "comm/transport.h"
#include "graph/job_file.h"
#include "runtime/cluster/agent.h"
#include "runtime/cluster/client.h"
#include "runtime/cluster/cluster_config.h"
#include "runtime/watch/link_pace.h"
#include "runtime/watch/pace.h"
#include "runtime/cli/command_util.h"
#include "runtime/cli/interrupts.h"

namespace rill {

int agent_command(const std::string& machines, int ctrl_port, AgentOptions options) {
  auto list = parse_machine_list(machines, ctrl_port);
  if (!list.ok()) return fail_command(list.status());
  options.machines = *list;
  if (options.heartbeat_s <= 0 || options.dead_after_s <= options.heartbeat_s)
    return fail_command(invalid_argument("--dead-after ({} s) must be longer than --heartbeat ({} s), which must be "
                                         "positive",
                                         options.dead_after_s, options.heartbeat_s));
  // The master writes job-ID.jsonl there: a folder that is not there, or
  // cannot be written, is found now, not when the first job fails.
  if (!options.metrics_dir.empty()) {
    struct stat st{};
    if (::stat(options.metrics_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return fail_command(invalid_argument("--metrics-dir {}: no such folder", options.metrics_dir));
    if (::access(options.metrics_dir.c_str(), W_OK | X_OK) != 0)
      return fail_command(invalid_argument("--metrics-dir {}: {}", options.metrics_dir, std::strerror(errno)));
  }
  // --key and --insecure are in the environment by now; a loopback agent
  // without either makes (or reads) the user's default key.
  const Machine& self = options.rank >= 0 && options.rank < static_cast<int>(options.machines.size())
                            ? options.machines[options.rank]
                            : options.machines[0];
  auto key = comm::agent_key(is_loopback_address(self.address));
  if (!key.ok()) return fail_command(key.status());
  options.key = *key;
  // A key handed down in memory (`rill run --nodes`: RILL_KEY_FILE is
  // /proc/self/fd/N) goes no further than this agent: nothing it starts
  // (a renderer, a shell) inherits the descriptor.
  if (const char* named = std::getenv(comm::kKeyFileEnv); named != nullptr) {
    int fd = -1;
    if (std::sscanf(named, "/proc/self/fd/%d", &fd) == 1 && fd > 2) (void)::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  // The user's default key, where this agent runs with another: no job
  // reads it either (base/file_access.h), though a root may hold it (`rill
  // run --nodes` gives its agents /).
  if (auto path = comm::default_key_path(); options.key && path.ok()) {
    const int fd = ::open(path->c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat st {};
    if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) guard_key_file(fd, st);
    else if (fd >= 0) ::close(fd);
  }
  comm::keep_large_buffers_mapped();  // the data plane's large messages reuse their pages
  Status status = run_agent(options);
  if (!status.ok()) return fail_command(status);
  return 0;
}

// A cluster job's timeline, when one was asked for and came: a job that
// failed has none, and one too large for a control message is left out (the
// master's log says so); either is a warning, not the job's error.
Status write_job_trace(const std::string& path, const SubmitResult& result) {
  if (path.empty() || !result.status.ok()) return {};
  if (result.trace_json.empty()) {
    fmt::print(stderr, "rill: warning: job {} sent no trace (see the master's log)\n", result.job_id);
    return {};
  }
  RILL_RETURN_IF_ERROR(write_text_file(path, result.trace_json));
  fmt::print("trace of job {} written to {}\n", result.job_id, path);
  return {};
}

int submit_command(const std::string& job_path, const std::string& master, const std::string& result_path,
                   const std::string& trace_path, bool follow, const SubmitOptions& submit) {
  auto text = read_text_file(job_path);
  if (!text.ok()) return fail_command(text.status());
  auto client = Client::connect(master, 10.0, /*running=*/true);
  if (!client.ok()) return fail_command(client.status());
  SubmitOptions options = submit;
  options.trace = !trace_path.empty();
  // On a terminal the step lines take each other's place (a line redrawn in
  // place); piped, every line stays.
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  bool step_shown = false;
  if (follow)
    options.on_line = [terminal, &step_shown](const std::string& line) {
      const bool step = terminal && line.rfind("step ", 0) == 0;
      // The last step line stays when another kind of line follows.
      fmt::print("{}{}{}", step_shown ? (step ? "\r\033[K" : "\n") : "", line, step ? "" : "\n");
      std::fflush(stdout);
      step_shown = step;
    };
  auto result = (*client)->submit_text(*text, job_path, options);
  if (step_shown) fmt::print("\n");
  if (!result.ok()) return fail_command(result.status());
  if (!result_path.empty()) {
    Status written = write_text_file(result_path, result->result_json);
    if (!written.ok()) return fail_command(written);
  }
  if (Status traced = write_job_trace(trace_path, *result); !traced.ok()) return fail_command(traced);
  if (!result->status.ok()) return fail_command(result->status);
  auto j = nlohmann::json::parse(result->result_json, nullptr, false);
  if (!j.is_discarded() && j.value("interrupted", false))
    fmt::print("job {} stopped at step {} of {} (rill stop)\n", result->job_id, j["steps"].get<int64_t>(),
               j["planned_steps"].get<int64_t>());
  else
    fmt::print("job {} done\n", result->job_id);
  return 0;
}

namespace {

// `rill status --comm`: each node's flight record of the running job
// (comm/flight_record.h), nodes named by the plan (running.nodes maps them).
int print_comm(const nlohmann::json& j, int64_t job) {
  if (j.is_discarded() || !j.contains("running")) return fail_command(invalid_argument("the master's status is not JSON"));
  const nlohmann::json& running = j["running"];
  if (running.is_null()) return fail_command(Status(Code::kNotFound, "no job is running"));
  if (job >= 0 && running["job_id"].get<int64_t>() != job)
    return fail_command(Status(Code::kNotFound, fmt::format("job {} is not running (job {} is)", job,
                                                            running["job_id"].get<int64_t>())));
  fmt::print("job {} ({}) on nodes {}: the plan's node i is rank nodes[i]\n", running["job_id"].get<int64_t>(),
             running["name"].get<std::string>(), running["nodes"].dump());
  if (!running.contains("comm") || running["comm"].empty()) fmt::print("no record yet (none before a node's first heartbeat)\n");
  else
    for (const auto& [rank, record] : running["comm"].items()) {
      fmt::print("rank {}:\n", rank);
      for (const auto& c : record.value("callers", nlohmann::json::array())) {
        std::string line = fmt::format("  {} among [{}]: {} calls, {}", c.value("name", ""),
                                       fmt::join(c.value("group", std::vector<int>{}), ", "), c.value("calls", 0),
                                       c.value("state", ""));
        if (c.contains("op"))
          line += fmt::format(" {} #{} for {:.0f} ms", c.value("op", ""), c.value("seq", int64_t{0}), c.value("ms", 0.0));
        if (c.contains("waiting_for")) line += fmt::format(", waiting for node {}", c["waiting_for"].get<int>());
        if (c.contains("last_completed"))
          line += fmt::format("; last completed {} #{}", c["last_completed"].value("op", ""),
                              c["last_completed"].value("seq", int64_t{0}));
        fmt::print("{}\n", line);
      }
      for (const auto& l : record.value("links", nlohmann::json::array()))
        fmt::print("  link with node {}: {} messages sent ({} bytes), {} received ({} bytes){}\n", l.value("node", -1),
                   l.value("sent", int64_t{0}), l.value("sent_bytes", int64_t{0}), l.value("received", int64_t{0}),
                   l.value("received_bytes", int64_t{0}),
                   l.contains("last_received_ms_ago")
                       ? fmt::format(", the last {:.0f} ms ago", l["last_received_ms_ago"].get<double>())
                       : "");
      for (const auto& e : record.value("events", nlohmann::json::array()))
        fmt::print("  {:>9.1f} ms ago  {:<8} {}\n", e.value("ms_ago", 0.0), e.value("event", ""),
                   e.contains("caller") ? fmt::format("{} #{}", e.value("caller", ""), e.value("seq", int64_t{0}))
                                        : fmt::format("node {} message {} ({} bytes)", e.value("node", -1),
                                                      e.value("message", int64_t{0}), e.value("bytes", int64_t{0})));
    }
  return 0;
}

}  // namespace

int status_command(const std::string& master, bool comm, int64_t job) {
  auto client = Client::connect(master, 5.0, /*running=*/true);
  if (!client.ok()) return fail_command(client.status());
  auto status = (*client)->status();
  if (!status.ok()) return fail_command(status.status());
  auto j = nlohmann::json::parse(*status, nullptr, false);
  if (comm) {
    // The records are the nodes' word: a field of an unexpected type is
    // reported, never a crash.
    try {
      return print_comm(j, job);
    } catch (const nlohmann::json::exception& e) {
      return fail_command(data_loss("the master's status holds a record this rill cannot read ({}): {}", e.what(),
                                    status->substr(0, 200)));
    }
  }
  if (j.is_discarded() || !j.contains("nodes")) {
    fmt::print("{}\n", *status);
    return 0;
  }
  fmt::print("{:<6}{:<24}{:<10}{:<14}{:<14}{:<10}{}\n", "node", "address", "devices", "state", "heartbeat", "steps/s",
             "device ms/step");
  for (const auto& n : j["nodes"]) {
    std::string pace;
    if (n.contains("steps_per_second"))
      pace = fmt::format("{:<10.1f}{:.2f}{}", n["steps_per_second"].get<double>(), n["busy_ms_per_step"].get<double>(),
                         n["slow"].get<bool>() ? "  slow" : "");
    if (n.contains("link_mb_per_s"))
      pace += fmt::format("  link {:.1f} MB/s{}", n["link_mb_per_s"].get<double>(),
                          n["slow_link"].get<bool>() ? " (slow)" : "");
    fmt::print("{:<6}{:<24}{:<10}{:<14}{:<14}{}\n", n["rank"].get<int>(), n["address"].get<std::string>(),
               n["devices"].get<std::string>(), n["state"].get<std::string>(),
               fmt::format("{:.1f} s ago", n["seconds_since_heartbeat"].get<double>()), pace);
  }
  if (j.contains("slow_nodes") && !j["slow_nodes"].empty()) {
    std::vector<std::string> named;
    for (const auto& r : j["slow_nodes"]) named.push_back(std::to_string(r.get<int>()));
    fmt::print("slow: node {} (device time per step {}x the others' median or more)\n", fmt::join(named, ", node "),
               kSlowRatio);
  }
  if (j.contains("slow_links") && !j["slow_links"].empty()) {
    std::vector<std::string> named;
    for (const auto& r : j["slow_links"]) named.push_back(std::to_string(r.get<int>()));
    fmt::print("slow link: node {} (its fastest data link {}x slower than the others' median or more)\n",
               fmt::join(named, ", node "), kSlowLinkRatio);
  }
  if (j["running"].is_null()) fmt::print("running: none\n");
  else {
    const auto& running = j["running"];
    std::string on;  // the nodes it runs on, when not every node (a lost node left behind)
    if (running.contains("nodes") && running["nodes"].size() < j["nodes"].size())
      on = fmt::format(" on nodes {} of {}", running["nodes"].dump(), j["nodes"].size());
    fmt::print("running: job {} ({}){}\n", running["job_id"].get<int64_t>(), running["name"].get<std::string>(), on);
  }
  fmt::print("queued: {}\n", j["queued"].size());
  if (j.contains("finished"))
    for (const auto& f : j["finished"])
      fmt::print("finished: job {} ({}) {}: {}\n", f["job_id"].get<int64_t>(), f["name"].get<std::string>(),
                 f["ok"].get<bool>() ? "ok" : "failed", f["line"].get<std::string>());
  return 0;
}

int stop_command(const std::string& master, int64_t job_id, bool now) {
  auto client = Client::connect(master, 5.0, /*running=*/true);
  if (!client.ok()) return fail_command(client.status());
  auto stopping = (*client)->stop(job_id, now);
  if (!stopping.ok()) return fail_command(stopping.status());
  fmt::print("{}\n", *stopping);
  return 0;
}

namespace {

// Whether something listens on address:port (a TCP connection is accepted).
bool accepts_connections(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool accepted = false;
  for (addrinfo* a = found; a && !accepted; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    accepted = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
  }
  freeaddrinfo(found);
  return accepted;
}

}  // namespace

int shutdown_command(const std::string& master) {
  auto client = Client::connect(master, 5.0, /*running=*/true);
  if (!client.ok()) return fail_command(client.status());
  // Every node's control address, to see each go.
  auto status = (*client)->status();
  if (!status.ok()) return fail_command(status.status());
  std::vector<Machine> nodes;
  auto j = nlohmann::json::parse(*status, nullptr, false);
  if (!j.is_discarded() && j.contains("nodes"))
    for (const auto& n : j["nodes"])
      if (auto m = parse_machine_list(n.value("address", "")); m.ok() && m->size() == 1) nodes.push_back((*m)[0]);
  if (Status down = (*client)->shutdown(); !down.ok()) return fail_command(down);
  // Returns once no node's control port takes connections any more, so that
  // a cluster started next on the same ports finds them free.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (const Machine& node : nodes)
    while (accepts_connections(node.address, node.ctrl_port)) {
      if (std::chrono::steady_clock::now() > give_up)
        return fail_command(Status(Code::kDeadlineExceeded,
                                   fmt::format("{} took the shutdown but its agent still listens after 15 s",
                                               format_machine(node))));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  fmt::print("the cluster of {} is shut down: its {} agent(s) exited\n", master, nodes.size());
  return 0;
}

int run_local_cluster(const ClusterRunArgs& args) {
  auto text = read_text_file(args.job_path);
  if (!text.ok()) return fail_command(text.status());
  // Check the job here, so a bad file never starts a cluster.
  auto job = graph::parse_job_json(*text, args.job_path, args.overrides);
  if (!job.ok()) return fail_command(job.status());
  std::string devices = args.devices.empty() ? job->train.devices : args.devices;
  // The nodes' logs: --logdir, or a fresh private folder (mkdtemp: made
  // here, 0700, never one another user planted in /tmp).
  std::string logdir = args.logdir;
  if (logdir.empty()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "rill-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      return fail_command(Status(Code::kUnavailable, fmt::format("cannot make a folder {} for the nodes' logs: {}",
                                                                 pattern, std::strerror(errno))));
    logdir = pattern;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(logdir, ec);
  }
  // A fresh key for this cluster alone (every connection encrypted, nobody
  // else let in), in memory that no path names (a memfd): its agents
  // inherit it and, with this client, read it as /proc/self/fd/N. No folder
  // a job may read holds it, and nothing is left behind, however this
  // process ends.
  if (!args.keyed) {
    ::unsetenv(comm::kKeyFileEnv);
    ::setenv(comm::kInsecureEnv, "1", 1);  // its agents and this client: no key, not even the default one
  } else {
    ::unsetenv(comm::kInsecureEnv);
    auto key = comm::generate_cluster_key();
    if (!key.ok()) return fail_command(key.status());
    auto held = comm::key_in_memory(*key);
    if (!held.ok()) return fail_command(held.status());
    ::setenv(comm::kKeyFileEnv, fmt::format("/proc/self/fd/{}", *held).c_str(), 1);
  }
  std::string machines;
  for (int r = 0; r < args.nodes; ++r) machines += fmt::format("{}127.0.0.{}:{}", r ? "," : "", r + 1, args.ctrl_port);
  auto start_agent = [&](int r, bool again) {
    std::vector<std::string> argv = {"/proc/self/exe", "agent", "--machines", machines, "--rank", std::to_string(r),
                                     "--devices", devices, "--join-timeout", fmt::format("{}", args.join_timeout_s),
                                     "--stall-timeout", fmt::format("{}", args.stall_timeout_s),
                                     // Only this process (it alone holds the fresh key) submits: the
                                     // job may read and write wherever its user can.
                                     "--data-root", "/", "--checkpoint-root", "/"};
    if (r == 0) argv.insert(argv.end(), {"--metrics-dir", logdir});  // job-1.jsonl beside the nodes' logs
    if (r == 0 && !args.http.empty()) argv.insert(argv.end(), {"--http", args.http});
    return spawn_process(argv, {}, r == 0 ? "" : fmt::format("{}/node-{}.log", logdir, r), again,
                         /*own_group=*/true);
  };
  // Ctrl-C or SIGTERM: the master stops the job at a step boundary on every
  // node (a second time: at once; a third ends this process, and the agents
  // with it).
  interrupts::install(3);
  std::vector<pid_t> agents;
  for (int r = 0; r < args.nodes; ++r) agents.push_back(start_agent(r, false));
  int code = 0;
  std::string master = fmt::format("127.0.0.1:{}", args.ctrl_port);
  // Wait for the cluster to form; an agent that exits first (a port in use,
  // say) has printed why, and there is no point in waiting for the deadline.
  auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(args.join_timeout_s + 5);
  bool formed = false;
  while (!formed && std::chrono::steady_clock::now() < give_up) {
    for (size_t r = 0; r < agents.size(); ++r) {
      int status = 0;
      if (agents[r] > 0 && waitpid(agents[r], &status, WNOHANG) == agents[r]) {
        agents[r] = -1;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
        code = 1;
        if (r > 0) {  // node 0 wrote to our terminal; the others to their logs
          auto log = read_text_file(fmt::format("{}/node-{}.log", logdir, r));
          if (log.ok()) fmt::print(stderr, "{}", *log);
        }
      }
    }
    if (code != 0) break;
    auto probe = Client::connect(master, 1.0);
    auto status = probe.ok() ? (*probe)->status() : StatusOr<std::string>(probe.status());
    if (status.ok()) {
      auto j = nlohmann::json::parse(*status, nullptr, false);
      formed = !j.is_discarded() && j.contains("nodes");
      if (formed)
        for (const auto& n : j["nodes"]) formed = formed && n["state"].get<std::string>().rfind("up", 0) == 0;
    }
    if (!formed) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (code != 0) fmt::print(stderr, "rill: an agent stopped before the cluster formed\n");
  else if (!formed) code = 1, fmt::print(stderr, "rill: the cluster did not form within {} s\n", args.join_timeout_s + 5);
  auto client = code != 0 ? StatusOr<std::unique_ptr<Client>>(Status(Code::kAborted, "no cluster"))
                          : Client::connect(master, args.join_timeout_s + 10);
  if (code == 0 && interrupts::count() > 0) code = interrupts::exit_code();  // before the job began
  int stopped = 0;  // the job ended early, as asked: the agents end as after a whole one
  if (code != 0) {
  } else if (!client.ok()) {
    code = fail_command(client.status());
  } else {
    SubmitOptions options;
    options.devices = devices;
    options.steps = args.steps;
    options.overrides = args.overrides;
    options.resume = args.resume;
    options.max_restarts = args.max_restarts;
    options.min_nodes = args.min_nodes;
    options.trace = !args.trace_path.empty();
    options.interrupts = &interrupts::counter();
    // The job is submitted and followed on a thread of its own; this one,
    // which started the agents (they end with it), watches them: while the
    // job runs, a non-master agent that dies is started again with the same
    // rank (its log goes on in the same file), and the master takes it back
    // and resumes the job.
    auto submitted = std::async(std::launch::async,
                                [&] { return (*client)->submit_text(*text, args.job_path, options); });
    int left = args.max_restarts;
    while (submitted.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      for (int r = 1; r < args.nodes && left > 0; ++r) {
        int status = 0;
        if (agents[r] <= 0 || waitpid(agents[r], &status, WNOHANG) != agents[r]) continue;
        agents[r] = -1;
        if (!failed_exit(status)) continue;
        --left;
        fmt::print(stderr, "rill: the agent of node {} {}; starting it again ({} restart(s) left)\n", r,
                   WIFSIGNALED(status) ? fmt::format("was killed by signal {}", WTERMSIG(status))
                                       : fmt::format("exited with code {}", WEXITSTATUS(status)),
                   left);
        agents[r] = start_agent(r, true);
      }
    }
    auto result = submitted.get();
    if (!result.ok()) {
      code = fail_command(result.status());
    } else {
      if (!args.result_path.empty()) {
        Status written = write_text_file(args.result_path, result->result_json);
        if (!written.ok()) code = fail_command(written);
      }
      if (Status traced = write_job_trace(args.trace_path, *result); !traced.ok()) code = fail_command(traced);
      if (!result->status.ok()) {
        code = fail_command(result->status);
        if (interrupts::count() > 1) code = interrupts::exit_code();  // stopped at once, as asked
      } else if (interrupts::count() > 0) {
        stopped = interrupts::exit_code();  // stopped early, as asked
      }
    }
    (void)(*client)->shutdown();
  }
  // Agents stop on the shutdown; any that does not within 10 s is killed.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (pid_t pid : agents) {
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
  if (code != 0 && args.nodes > 1) fmt::print(stderr, "rill: the other nodes' logs are in {}\n", logdir);
  return code != 0 ? code : stopped;
}

}  // namespace rill
