// Machine lists, Slurm node lists, the launcher's configuration and the
// process environment queries: good input, bad input and precedence.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include <fmt/ranges.h>

#include "runtime/cluster/cluster_config.h"
#include "runtime/cluster/device_group.h"
#include "runtime/cluster/env.h"

namespace rill {
namespace {

using Env = std::map<std::string, std::string>;
using Strings = std::vector<std::string>;

std::string error_of(const Status& status) { return status.ok() ? "(ok)" : status.message(); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string write_temp(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / (name + "." + std::to_string(getpid()));
  std::ofstream(path) << text;
  return path.string();
}

// Sets (or, with nullptr, unsets) a variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

TEST_CASE("machine list: comma-separated entries with optional ports and IPv6 in brackets") {
  auto machines = parse_machine_list("127.0.0.1, 127.0.0.2:9990,[::1]:9980,node-7.cluster", 9000);
  REQUIRE_MESSAGE(machines.ok(), error_of(machines.status()));
  CHECK(*machines == std::vector<Machine>{{"127.0.0.1", 9000}, {"127.0.0.2", 9990}, {"::1", 9980},
                                          {"node-7.cluster", 9000}});
  auto one = parse_machine_list("localhost");
  REQUIRE(one.ok());
  CHECK(*one == std::vector<Machine>{{"localhost", kDefaultCtrlPort}});
  auto v6 = parse_machine_list("[fe80::1%eth0]");
  REQUIRE_MESSAGE(v6.ok(), error_of(v6.status()));
  CHECK((*v6)[0].address == "fe80::1%eth0");
  CHECK(format_machine({"::1", 9988}) == "[::1]:9988");
  CHECK(format_machine({"a", 1}) == "a:1");
  CHECK(tcp_endpoint("::1", 9989) == "tcp://[::1]:9989");
  CHECK(tcp_endpoint("127.0.0.2", 9989) == "tcp://127.0.0.2:9989");
}

TEST_CASE("machine list: bad entries name the entry and the problem") {
  struct Case {
    std::string input, message;
  };
  for (const Case& c : std::vector<Case>{
           {"", "empty"},
           {"a,,b", "entry 2 is empty"},
           {"a,b,", "entry 3 is empty"},
           {"a,b:x9", "entry 2 ('b:x9'): port 'x9' is not a number"},
           {"a:0", "port 0 is out of range"},
           {"a:65535", "port 65535 is out of range 1..65534"},
           {"a,:9988", "entry 2 (':9988'): empty address"},
           {"[::1", "without a closing ']'"},
           {"[]:1", "empty address"},
           {"[::1]9988", "expected ':port'"},
           {"::1", "IPv6 address goes in brackets"},
           {"a,b c", "'b c' is not a host name"},
           {"a,b,a", "entry 3 ('a'): duplicates machine list entry 1"},
           {"a:9988,A", "duplicates"},
           {"a:9988,b,a:9989", "overlap those of machine list entry 1"},
           {"no/such/machines.txt", "does not exist"},
       }) {
    CAPTURE(c.input);
    auto machines = parse_machine_list(c.input);
    REQUIRE_FALSE(machines.ok());
    CHECK(machines.status().code() != Code::kOk);
    CHECK_MESSAGE(contains(machines.status().message(), c.message), machines.status().message());
  }
  CHECK_FALSE(parse_machine_list("a", 65535).ok());
  CHECK(parse_machine_list("a:9988,a:9990").ok());  // 9988-9989 and 9990-9991 do not overlap
}

// Where a standby agent says it listens (`rill agent --address`): an
// address literal in one spelling, that one machine holds.
TEST_CASE("an address one node reaches another at: a literal in its one spelling, no name, no wildcard") {
  CHECK(reachable_address("10.0.0.9", "x").value() == "10.0.0.9");
  CHECK(reachable_address("fd00:0:0::9", "x").value() == "fd00::9");
  CHECK(reachable_address("::ffff:10.0.0.9", "x").value() == "::ffff:10.0.0.9");
  for (const char* refused : {"0.0.0.0", "::", "255.255.255.255", "224.0.0.1", "239.1.2.3", "ff02::1"}) {
    CAPTURE(refused);
    auto r = reachable_address(refused, "--address");
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("no one machine's address") != std::string::npos);
  }
  for (const char* name : {"localhost", "node3", "10.0.0", "010.0.0.9", ""}) {
    CAPTURE(name);
    auto r = reachable_address(name, "--address");
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("is not an IPv4 or IPv6 address") != std::string::npos);
  }
}

TEST_CASE("machine list: a file with one entry per line, comments and blank lines") {
  std::string path = write_temp("machines", "# the cluster\n\n127.0.0.1   # master\n  127.0.0.2:9990\n[::1]\n");
  auto machines = parse_machine_list(path);
  REQUIRE_MESSAGE(machines.ok(), error_of(machines.status()));
  CHECK(*machines == std::vector<Machine>{{"127.0.0.1", 9988}, {"127.0.0.2", 9990}, {"::1", 9988}});

  std::string bad = write_temp("machines_bad", "127.0.0.1\n# ok\n127.0.0.2:port\n");
  auto error = parse_machine_list(bad);
  REQUIRE_FALSE(error.ok());
  CHECK_MESSAGE(contains(error.status().message(), bad + ":3 ('127.0.0.2:port'): port 'port'"),
                error.status().message());
  std::string two = write_temp("machines_two", "a, b\n");
  CHECK(contains(error_of(parse_machine_list(two).status()), "one entry per line"));
  std::string empty = write_temp("machines_empty", "# nobody\n\n");
  CHECK(contains(error_of(parse_machine_list(empty).status()), "lists no machines"));
  for (const std::string& p : {path, bad, two, empty}) std::filesystem::remove(p);
}

TEST_CASE("Slurm node lists expand ranges, keep zero padding and take cartesian products") {
  struct Case {
    std::string input;
    Strings hosts;
  };
  for (const Case& c : std::vector<Case>{
           {"node[01-04,07]", {"node01", "node02", "node03", "node04", "node07"}},
           {"a[1-2],b3", {"a1", "a2", "b3"}},
           {"rack[1-2]-n[01-02]", {"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}},
           {"n[08-10]", {"n08", "n09", "n10"}},
           {"n[8-10]", {"n8", "n9", "n10"}},
           {"host", {"host"}},
           {"h1,h2.example.com", {"h1", "h2.example.com"}},
           {"gpu[3]x", {"gpu3x"}},
           {"a[1,3],b[002-003]", {"a1", "a3", "b002", "b003"}},
       }) {
    CAPTURE(c.input);
    auto hosts = expand_slurm_nodelist(c.input);
    REQUIRE_MESSAGE(hosts.ok(), error_of(hosts.status()));
    CHECK(*hosts == c.hosts);
  }
}

TEST_CASE("Slurm node lists: malformed input is an error") {
  for (const char* input :
       {"", "node[", "node]", "node[]", "node[1-]", "node[-1]", "node[3-1]", "node[a]", "a,,b", "a,", "node[1,,2]",
        "node[[1]]", "node[1-2-3]", "node[0-99999]", "a[0-999]b[0-999]", "a b", "node[1-2"}) {
    CAPTURE(input);
    auto hosts = expand_slurm_nodelist(input);
    CHECK_FALSE(hosts.ok());
    CHECK(hosts.status().code() == Code::kInvalidArgument);
  }
  CHECK(contains(error_of(expand_slurm_nodelist("node[3-1]").status()), "runs backwards"));
  CHECK(contains(error_of(expand_slurm_nodelist("a[0-999]b[0-999]").status()), "more than 65536"));
}

TEST_CASE("integers are parsed strictly") {
  CHECK(*parse_int(" 42 ", "x") == 42);
  CHECK(*parse_int("+3", "x") == 3);
  CHECK(*parse_int("-3", "x") == -3);
  for (const char* bad : {"", "abc", "4x", "1.5", "99999999999", "+", "--1"}) {
    CAPTURE(bad);
    auto value = parse_int(bad, "env RILL_RANK");
    REQUIRE_FALSE(value.ok());
    CHECK(contains(value.status().message(), "env RILL_RANK"));
  }
}

TEST_CASE("launch config: defaults, flags and the source of every field") {
  auto defaults = resolve_launch_config({}, {});
  REQUIRE(defaults.ok());
  CHECK(defaults->nnodes == 1);
  CHECK(defaults->node_rank == 0);
  CHECK(defaults->nproc_per_node == 1);
  CHECK(defaults->master_addr == "127.0.0.1");
  CHECK(defaults->master_port == 9988);
  CHECK(defaults->logdir == "log");
  CHECK_FALSE(defaults->redirect);
  CHECK(defaults->machines.empty());
  for (const char* field : {"nnodes", "node_rank", "nproc_per_node", "master_addr", "master_port", "logdir"})
    CHECK(defaults->sources.at(field) == "default");

  LaunchFlags flags;
  flags.nnodes = 4;
  flags.node_rank = 3;
  flags.nproc_per_node = 2;
  flags.master_addr = "10.0.0.1";
  flags.master_port = 7000;
  flags.logdir = "/tmp/rill-logs";
  flags.redirect = true;
  auto config = resolve_launch_config(flags, {});
  REQUIRE_MESSAGE(config.ok(), error_of(config.status()));
  CHECK(config->world_size() == 8);
  CHECK(config->node_rank == 3);
  CHECK(config->master_addr == "10.0.0.1");
  CHECK(config->master_port == 7000);
  CHECK(config->redirect);
  CHECK(config->sources.at("node_rank") == "flag");
  CHECK(config->notes.empty());
}

TEST_CASE("launch config: flags win over the environment, which wins over MPI, then Slurm") {
  Env env{{"MASTER_ADDR", "10.0.0.9"}, {"MASTER_PORT", "6000"}, {"NNODES", "3"}, {"NODE_RANK", "2"},
          {"SLURM_PROCID", "0"},        {"SLURM_NTASKS", "3"},  {"SLURM_JOB_NODELIST", "n[1-3]"}};
  auto from_env = resolve_launch_config({}, env);
  REQUIRE_MESSAGE(from_env.ok(), error_of(from_env.status()));
  CHECK(from_env->master_addr == "10.0.0.9");
  CHECK(from_env->sources.at("master_addr") == "env MASTER_ADDR");
  CHECK(from_env->master_port == 6000);
  CHECK(from_env->sources.at("master_port") == "env MASTER_PORT");
  CHECK(from_env->nnodes == 3);
  CHECK(from_env->sources.at("nnodes") == "env NNODES");
  CHECK(from_env->node_rank == 2);
  CHECK(from_env->sources.at("node_rank") == "env NODE_RANK");
  CHECK(from_env->machines == Strings{"n1", "n2", "n3"});
  CHECK(from_env->sources.at("machines") == "slurm SLURM_JOB_NODELIST");

  LaunchFlags flags;
  flags.node_rank = 1;
  flags.master_addr = "10.0.0.1";
  flags.master_port = 7000;
  env["MASTER_PORT"] = "not-a-port";  // overridden by the flag, so harmless
  auto from_flags = resolve_launch_config(flags, env);
  REQUIRE_MESSAGE(from_flags.ok(), error_of(from_flags.status()));
  CHECK(from_flags->node_rank == 1);
  CHECK(from_flags->sources.at("node_rank") == "flag");
  CHECK(from_flags->master_addr == "10.0.0.1");
  CHECK(from_flags->sources.at("master_addr") == "flag");
  CHECK(from_flags->master_port == 7000);
  CHECK(from_flags->nnodes == 3);  // no flag: still NNODES
  std::string notes = fmt::format("{}", fmt::join(from_flags->notes, "; "));
  CHECK_MESSAGE(contains(notes, "NODE_RANK=2 ignored: --node_rank 1 wins"), notes);
  CHECK_MESSAGE(contains(notes, "MASTER_ADDR=10.0.0.9 ignored"), notes);
  CHECK_MESSAGE(contains(notes, "MASTER_PORT=not-a-port ignored"), notes);

  std::string line = describe_sources(*from_flags);
  CHECK_MESSAGE(contains(line, "node_rank=1 from flag"), line);
  CHECK_MESSAGE(contains(line, "nnodes=3 from env NNODES"), line);
  CHECK_MESSAGE(contains(line, "machines=n1,n2,n3 from slurm SLURM_JOB_NODELIST"), line);
}

TEST_CASE("launch config: Slurm and Open MPI") {
  Env slurm{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
            {"SLURM_JOB_NODELIST", "gpu[07-08]"}};
  auto config = resolve_launch_config({}, slurm);
  REQUIRE_MESSAGE(config.ok(), error_of(config.status()));
  CHECK(config->nnodes == 2);
  CHECK(config->sources.at("nnodes") == "slurm SLURM_NTASKS");
  CHECK(config->node_rank == 1);
  CHECK(config->sources.at("node_rank") == "slurm SLURM_PROCID");
  CHECK(config->master_addr == "gpu07");
  CHECK(config->sources.at("master_addr") == "slurm SLURM_JOB_NODELIST");
  CHECK(config->machines == Strings{"gpu07", "gpu08"});

  // A step on part of the allocation: the step's list is the machine list.
  Env step = slurm;
  step["SLURM_JOB_NODELIST"] = "gpu[01-08]";
  step["SLURM_STEP_NODELIST"] = "gpu[03-04]";
  auto in_step = resolve_launch_config({}, step);
  REQUIRE_MESSAGE(in_step.ok(), error_of(in_step.status()));
  CHECK(in_step->master_addr == "gpu03");
  CHECK(in_step->sources.at("machines") == "slurm SLURM_STEP_NODELIST");

  Env only_list{{"SLURM_JOB_NODELIST", "a[1-4]"}, {"SLURM_PROCID", "2"}};
  auto counted = resolve_launch_config({}, only_list);
  REQUIRE(counted.ok());
  CHECK(counted->nnodes == 4);
  CHECK(counted->sources.at("nnodes") == "slurm SLURM_JOB_NODELIST");

  Env two_per_node = slurm;
  two_per_node["SLURM_LOCALID"] = "1";
  CHECK(contains(error_of(resolve_launch_config({}, two_per_node).status()), "srun --ntasks-per-node=1"));

  Env more_tasks = slurm;
  more_tasks["SLURM_NTASKS"] = "4";
  more_tasks["SLURM_PROCID"] = "3";
  CHECK(contains(error_of(resolve_launch_config({}, more_tasks).status()), "lists 2 nodes"));
  LaunchFlags four;
  four.nnodes = 4;
  auto overridden = resolve_launch_config(four, more_tasks);
  REQUIRE_MESSAGE(overridden.ok(), error_of(overridden.status()));
  CHECK(overridden->machines.empty());
  REQUIRE(overridden->notes.size() == 1);
  CHECK(contains(overridden->notes[0], "not used"));

  Env bad_list = slurm;
  bad_list["SLURM_JOB_NODELIST"] = "gpu[07-";
  CHECK(contains(error_of(resolve_launch_config({}, bad_list).status()), "slurm SLURM_JOB_NODELIST"));

  Env mpi = slurm;  // mpirun inside an allocation: MPI's ranks are this task's
  mpi["OMPI_COMM_WORLD_RANK"] = "0";
  mpi["OMPI_COMM_WORLD_SIZE"] = "2";
  mpi["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
  auto from_mpi = resolve_launch_config({}, mpi);
  REQUIRE_MESSAGE(from_mpi.ok(), error_of(from_mpi.status()));
  CHECK(from_mpi->node_rank == 0);
  CHECK(from_mpi->sources.at("node_rank") == "ompi OMPI_COMM_WORLD_RANK");
  CHECK(from_mpi->sources.at("nnodes") == "ompi OMPI_COMM_WORLD_SIZE");
  mpi["OMPI_COMM_WORLD_LOCAL_RANK"] = "3";
  CHECK(contains(error_of(resolve_launch_config({}, mpi).status()), "OMPI_COMM_WORLD_LOCAL_RANK=3"));
}

TEST_CASE("launch config: WORLD_SIZE counts processes, and RANK is a node's first process") {
  auto torch = resolve_launch_config({}, {{"WORLD_SIZE", "4"}, {"RANK", "2"}, {"MASTER_ADDR", "h0"}});
  REQUIRE_MESSAGE(torch.ok(), error_of(torch.status()));
  CHECK(torch->nnodes == 4);
  CHECK(torch->sources.at("nnodes") == "env WORLD_SIZE");
  CHECK(torch->node_rank == 2);
  CHECK(torch->sources.at("node_rank") == "env RANK");

  LaunchFlags two_per_node;
  two_per_node.nproc_per_node = 2;
  auto derived = resolve_launch_config(two_per_node, {{"WORLD_SIZE", "8"}, {"RANK", "4"}});
  REQUIRE_MESSAGE(derived.ok(), error_of(derived.status()));
  CHECK(derived->nnodes == 4);
  CHECK(derived->node_rank == 2);

  LaunchFlags four_per_node;
  four_per_node.nproc_per_node = 4;
  // A platform that counts nodes in WORLD_SIZE: 2 nodes, 4 processes each.
  std::string message = error_of(resolve_launch_config(four_per_node, {{"WORLD_SIZE", "2"}}).status());
  CHECK_MESSAGE(contains(message, "WORLD_SIZE counts processes"), message);
  message = error_of(resolve_launch_config(four_per_node, {{"WORLD_SIZE", "8"}, {"RANK", "5"}}).status());
  CHECK_MESSAGE(contains(message, "RANK=5"), message);

  LaunchFlags two_nodes;
  two_nodes.nnodes = 2;
  message = error_of(resolve_launch_config(two_nodes, {{"WORLD_SIZE", "8"}}).status());
  CHECK_MESSAGE(contains(message, "WORLD_SIZE=8 (env) but nnodes 2 (flag) * nproc_per_node 1 (default) = 2"),
                message);
  message = error_of(resolve_launch_config({}, {{"NNODES", "2"}, {"WORLD_SIZE", "3"}}).status());
  CHECK_MESSAGE(contains(message, "nnodes 2 (env NNODES)"), message);

  // Both factors given as flags: they win, and the disagreement is noted.
  two_nodes.nproc_per_node = 4;
  auto noted = resolve_launch_config(two_nodes, {{"WORLD_SIZE", "2"}});
  REQUIRE_MESSAGE(noted.ok(), error_of(noted.status()));
  REQUIRE(noted->notes.size() == 1);
  CHECK(contains(noted->notes[0], "WORLD_SIZE=2 ignored"));

  message = error_of(resolve_launch_config({}, {{"NNODES", "2"}, {"NODE_RANK", "1"}, {"RANK", "0"}}).status());
  CHECK_MESSAGE(contains(message, "RANK=0 (env) does not match node_rank 1"), message);
  CHECK(resolve_launch_config({}, {{"NNODES", "2"}, {"NODE_RANK", "1"}, {"RANK", "1"}}).ok());
  message = error_of(resolve_launch_config({}, {{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"LOCAL_RANK", "1"}}).status());
  CHECK_MESSAGE(contains(message, "LOCAL_RANK=1"), message);
}

TEST_CASE("launch config: values out of range are errors naming their source") {
  auto error = [](const LaunchFlags& flags, const Env& env) {
    return error_of(resolve_launch_config(flags, env).status());
  };
  LaunchFlags flags;
  flags.nnodes = 2;
  flags.node_rank = 2;
  CHECK(contains(error(flags, {}), "node_rank 2 (flag) is out of range for nnodes 2 (flag): node ranks run 0..1"));
  CHECK(contains(error({}, {{"NNODES", "2"}, {"NODE_RANK", "5"}}), "node_rank 5 (env NODE_RANK)"));
  CHECK(contains(error({}, {{"NODE_RANK", "-1"}}), "node_rank -1"));
  LaunchFlags zero;
  zero.nnodes = 0;
  CHECK(contains(error(zero, {}), "nnodes 0 (flag) must be at least 1"));
  LaunchFlags huge;
  huge.nnodes = 1 << 20;
  huge.nproc_per_node = 1 << 20;
  CHECK(contains(error(huge, {}), "is more than"));
  LaunchFlags no_proc;
  no_proc.nproc_per_node = 0;
  CHECK(contains(error(no_proc, {}), "nproc_per_node 0"));
  LaunchFlags port;
  port.master_port = 70000;
  CHECK(contains(error(port, {}), "master_port 70000 (flag) is out of range"));
  CHECK(contains(error({}, {{"MASTER_PORT", "abc"}}), "env MASTER_PORT: 'abc' is not an integer"));
  CHECK(contains(error({}, {{"RANK", "x"}}), "env RANK"));
  CHECK(contains(error({}, {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "z"}}), "slurm SLURM_NTASKS"));
  LaunchFlags redirect;
  redirect.redirect = true;
  redirect.logdir = "";
  CHECK(contains(error(redirect, {}), "needs a log folder"));
  CHECK(resolve_launch_config({}, {{"MASTER_ADDR", ""}, {"RANK", ""}}).ok());  // empty means unset
}

TEST_CASE("env queries: unset means one process; set values are read; malformed ones are errors") {
  ScopedEnv a("RILL_WORLD_SIZE", nullptr), b("RILL_RANK", nullptr), c("RILL_LOCAL_RANK", nullptr),
      d("RILL_NODE_SIZE", nullptr);
  CHECK(env::world_size() == 1);
  CHECK(env::rank() == 0);
  CHECK(env::local_rank() == 0);
  CHECK(env::node_size() == 1);
  REQUIRE(env::try_process_place().ok());
  {
    ScopedEnv w("RILL_WORLD_SIZE", "8"), r("RILL_RANK", "5"), l("RILL_LOCAL_RANK", "1"), n("RILL_NODE_SIZE", "2");
    CHECK(env::world_size() == 8);
    CHECK(env::rank() == 5);
    CHECK(env::local_rank() == 1);
    CHECK(env::node_size() == 2);
    auto place = env::try_process_place();
    REQUIRE_MESSAGE(place.ok(), error_of(place.status()));
    CHECK(place->rank == 5);
    {
      ScopedEnv bad("RILL_RANK", "abc");
      CHECK(env::rank() == 0);
      CHECK(contains(error_of(env::try_rank().status()), "RILL_RANK: 'abc' is not an integer"));
      CHECK_FALSE(env::try_process_place().ok());
    }
    {
      ScopedEnv big("RILL_RANK", "8");
      CHECK(contains(error_of(env::try_process_place().status()), "RILL_RANK=8 is not below RILL_WORLD_SIZE=8"));
    }
    {
      ScopedEnv local("RILL_LOCAL_RANK", "4");
      CHECK(contains(error_of(env::try_process_place().status()), "RILL_LOCAL_RANK=4"));
    }
  }
  ScopedEnv zero("RILL_WORLD_SIZE", "0");
  CHECK(env::world_size() == 1);
  CHECK(contains(error_of(env::try_world_size().status()), "must be at least 1"));
  ScopedEnv negative("RILL_LOCAL_RANK", "-2");
  CHECK(env::local_rank() == 0);
  CHECK_FALSE(env::try_local_rank().ok());
}

TEST_CASE("launch_environment gives each process its place, and the queries read it back") {
  LaunchFlags flags;
  flags.nnodes = 2;
  flags.node_rank = 1;
  flags.nproc_per_node = 3;
  flags.master_addr = "10.1.0.1";
  auto config = resolve_launch_config(flags, {});
  REQUIRE(config.ok());
  auto vars = launch_environment(*config, 2);
  CHECK(vars.at("RILL_WORLD_SIZE") == "6");
  CHECK(vars.at("RILL_RANK") == "5");
  CHECK(vars.at("RILL_LOCAL_RANK") == "2");
  CHECK(vars.at("RILL_NODE_SIZE") == "2");
  CHECK(vars.at("RILL_NODE_RANK") == "1");
  CHECK(vars.at("WORLD_SIZE") == "6");
  CHECK(vars.at("RANK") == "5");
  CHECK(vars.at("LOCAL_RANK") == "2");
  CHECK(vars.at("LOCAL_WORLD_SIZE") == "3");
  CHECK(vars.at("MASTER_ADDR") == "10.1.0.1");
  CHECK(vars.at("MASTER_PORT") == "9988");
  CHECK(vars.at("RILL_DEVICE") == "cpu");
  CHECK(vars.count("CUDA_VISIBLE_DEVICES") == 0);
  std::vector<ScopedEnv> scoped;
  scoped.reserve(vars.size());
  for (const auto& [name, value] : vars) scoped.emplace_back(name.c_str(), value.c_str());
  auto place = env::try_process_place();
  REQUIRE_MESSAGE(place.ok(), error_of(place.status()));
  CHECK(place->world_size == 6);
  CHECK(place->rank == 5);
  CHECK(place->local_rank == 2);
  CHECK(place->node_size == 2);
  Env now = current_environment();
  CHECK(now.at("RILL_RANK") == "5");
  // The variables agree with the launcher's own rules: resolving process 0's
  // environment (given nproc_per_node) finds the same node again, while a
  // process other than the node's first is refused as a launcher.
  LaunchFlags nproc;
  nproc.nproc_per_node = 3;
  auto again = resolve_launch_config(nproc, launch_environment(*config, 0));
  REQUIRE_MESSAGE(again.ok(), error_of(again.status()));
  CHECK(again->nnodes == 2);
  CHECK(again->node_rank == 1);
  CHECK(again->master_addr == "10.1.0.1");
  CHECK(contains(error_of(resolve_launch_config(nproc, launch_environment(*config, 1)).status()), "LOCAL_RANK=1"));
}

// A lone process's device collectives (no launcher: world 1, cpu): each
// gives its input back; what no rank could do is refused by name.
TEST_CASE("a program's device collectives alone on cpu, and the calls they refuse") {
  ScopedEnv world("RILL_WORLD_SIZE", nullptr), rank("RILL_RANK", nullptr), device("RILL_DEVICE", "cpu");
  auto group = env::device_communicator(std::chrono::seconds(5));
  REQUIRE_MESSAGE(group.ok(), error_of(group.status()));
  DeviceGroup& g = **group;
  CHECK(std::string(g.backend()) == "host");
  CHECK(g.cuda() == nullptr);
  const std::vector<float> x{1.5f, -2.0f};
  std::vector<float> out(2);
  REQUIRE(g.all_reduce(x.data(), out.data(), 2, DType::kF32, comm::ReduceOp::kAverage, 1).ok());
  CHECK(out == x);
  REQUIRE(g.all_to_all(x.data(), out.data(), 2, DType::kF32, 2).ok());
  CHECK(out == x);
  const std::vector<int32_t> i{3, 4};
  std::vector<int32_t> i_out(2);
  CHECK(contains(error_of(g.all_reduce(i.data(), i_out.data(), 2, DType::kI32, comm::ReduceOp::kAverage, 3)),
                 "an average of i32"));
  CHECK(contains(error_of(g.broadcast(out.data(), 2, DType::kF32, 1, 4)), "broadcast: rank 1 of 1"));
  CHECK(contains(error_of(g.send(x.data(), 2, DType::kF32, -1, 5)), "send: rank -1 of 1"));
}

TEST_CASE("RILL_DEVICE other than cpu, cuda or cuda:N is refused, naming it") {
  ScopedEnv world("RILL_WORLD_SIZE", nullptr), rank("RILL_RANK", nullptr), device("RILL_DEVICE", "tpu:0");
  auto group = env::device_communicator(std::chrono::seconds(5));
  REQUIRE_FALSE(group.ok());
  CHECK(contains(error_of(group.status()), "RILL_DEVICE=tpu:0"));
}

TEST_CASE("rill launch --device cuda: a GPU a process, the i-th of CUDA_VISIBLE_DEVICES where it is set") {
  LaunchFlags flags;
  flags.nproc_per_node = 3;
  flags.device = "cuda";
  auto plain = resolve_launch_config(flags, {});
  REQUIRE_MESSAGE(plain.ok(), error_of(plain.status()));
  CHECK(plain->gpus == std::vector<std::string>{"0", "1", "2"});
  CHECK(launch_environment(*plain, 2).at("CUDA_VISIBLE_DEVICES") == "2");
  CHECK(launch_environment(*plain, 2).at("RILL_DEVICE") == "cuda:0");  // the one GPU it sees
  CHECK(contains(describe_sources(*plain), "device=cuda (GPUs 0,1,2) from flag"));
  auto visible = resolve_launch_config(flags, {{"CUDA_VISIBLE_DEVICES", "3,5,6,7"}});
  REQUIRE_MESSAGE(visible.ok(), error_of(visible.status()));
  CHECK(launch_environment(*visible, 0).at("CUDA_VISIBLE_DEVICES") == "3");
  CHECK(launch_environment(*visible, 1).at("CUDA_VISIBLE_DEVICES") == "5");
  // Too few GPUs for the processes, and a device type there is not.
  CHECK(contains(error_of(resolve_launch_config(flags, {{"CUDA_VISIBLE_DEVICES", "1,2"}}).status()),
                 "CUDA_VISIBLE_DEVICES=1,2 (env) names 2 GPU(s) for nproc_per_node 3"));
  flags.device = "tpu";
  CHECK(contains(error_of(resolve_launch_config(flags, {}).status()), "device 'tpu' (flag): expected cpu or cuda"));
  // cpu slots (the default) leave CUDA_VISIBLE_DEVICES alone.
  flags.device.reset();
  auto cpu = resolve_launch_config(flags, {{"CUDA_VISIBLE_DEVICES", "3"}});
  REQUIRE(cpu.ok());
  CHECK(cpu->device == "cpu");
  CHECK(launch_environment(*cpu, 0).count("CUDA_VISIBLE_DEVICES") == 0);
}

TEST_CASE("per-node log paths are unique across nodes and processes") {
  CHECK(node_log_path("log", 1, 0) == "log/node1.proc0.log");
  CHECK(node_log_path("log/", 1, 2) == "log/node1.proc2.log");
  CHECK(node_log_path("/var/rill", 3, -1) == "/var/rill/node3.log");
  CHECK(node_log_path("", 0, 0) == "node0.proc0.log");
  CHECK(node_log_path("log", 1, 0) != node_log_path("log", 0, 1));
}

TEST_CASE("a pserver job's pservers given by machine become node numbers; FLAGS_rpc_deadline replaces its deadline") {
  auto machines = parse_machine_list("10.0.0.1:9988,10.0.0.2:9988,10.0.0.2:9990,10.0.0.3");
  REQUIRE(machines.ok());
  graph::Job job;
  job.distributed = graph::Distributed{};
  job.distributed->pservers = {"10.0.0.2:9990", "10.0.0.3", "0"};
  unsetenv("FLAGS_rpc_deadline");
  REQUIRE(resolve_distributed(&job, *machines).ok());
  CHECK(job.distributed->pservers == std::vector<std::string>{"2", "3", "0"});
  CHECK(job_stall_timeout_s(job, 60) == 180.0);  // the default 180000 ms
  setenv("FLAGS_rpc_deadline", "5000", 1);
  REQUIRE(resolve_distributed(&job, *machines).ok());
  CHECK(job.distributed->rpc_deadline == 5000);
  CHECK(job_stall_timeout_s(job, 60) == 5.0);
  setenv("FLAGS_rpc_deadline", "soon", 1);
  Status bad_flag = resolve_distributed(&job, *machines);
  CHECK(bad_flag.message().find("env FLAGS_rpc_deadline") != std::string::npos);
  unsetenv("FLAGS_rpc_deadline");
  // The RPC thread counts likewise, within 1 to kMaxRpcThreads.
  setenv("FLAGS_rpc_send_thread_num", "3", 1);
  setenv("FLAGS_rpc_prefetch_thread_num", "2", 1);
  REQUIRE(resolve_distributed(&job, *machines).ok());
  CHECK(job.distributed->rpc_send_thread_num == 3);
  CHECK(job.distributed->rpc_get_thread_num == 1);
  CHECK(job.distributed->rpc_prefetch_thread_num == 2);
  setenv("FLAGS_rpc_get_thread_num", "0", 1);
  CHECK(resolve_distributed(&job, *machines).message().find("env FLAGS_rpc_get_thread_num must be 1 to 64, got 0") !=
        std::string::npos);
  for (const char* name : {"FLAGS_rpc_send_thread_num", "FLAGS_rpc_get_thread_num", "FLAGS_rpc_prefetch_thread_num"})
    unsetenv(name);
  // An address two machines share needs its port; one of no machine is named.
  job.distributed->pservers = {"10.0.0.2"};
  CHECK(resolve_distributed(&job, *machines).message().find("'10.0.0.2' is the address of several machines") !=
        std::string::npos);
  job.distributed->pservers = {"10.0.0.9:9988"};
  CHECK(resolve_distributed(&job, *machines).message().find(
            "'10.0.0.9:9988' is neither a node number nor a machine of the list") != std::string::npos);
  // Other modes keep their default stall timeout.
  job.distributed->mode = graph::DistMode::kCollective;
  CHECK(job_stall_timeout_s(job, 60) == 60.0);
}

}  // namespace
}  // namespace rill
