// The `rill` command as a user runs it: a real process, its exit code, its
// output and the files it writes.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "process_util.h"

namespace {

using rill::testing::Ran;
using rill::testing::root;

using rill::testing::run_rill;
std::filesystem::path temp_dir() { return ::rill::testing::temp_dir("rill-cli-"); }

}  // namespace

TEST_CASE("rill run trains linear regression on cpu:2 and writes the result") {
  auto result_file = temp_dir() / "result.json";
  Ran ran = run_rill("run " + root() + "/samples/linear_regression/linear_regression.json --devices cpu:2 --result " +
                 result_file.string());
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  CHECK(ran.output.find("step     50/500") != std::string::npos);
  // A small model's learned values are printed, as the seeds' examples do
  // (converged on exact data: a loss near 1e-11, so w is within 1e-5 of
  // [2, 3] on any CPU, and prints as 2.0000 and 3.0000).
  CHECK(ran.output.find("w:[[2.0000], [3.0000]]") != std::string::npos);
  std::ifstream in(result_file);
  auto result = nlohmann::json::parse(in);
  CHECK(result["status"] == "ok");
  CHECK(result["steps"] == 500);
  auto w = result["variables"]["w"]["values"];
  REQUIRE(w.size() == 2);
  CHECK(std::abs(w[0].get<double>() - 2.0) < 1e-3);
  CHECK(std::abs(w[1].get<double>() - 3.0) < 1e-3);
  CHECK(result["samples_per_sec"].get<double>() > 0);
  // The result names the CPU code behind its figures: the loops' copy (this
  // CPU's best) and OpenBLAS's kernels.
  CHECK(result["cpu_kernels"]["loops"].get<std::string>().size() > 0);
  CHECK(result["cpu_kernels"]["blas"].get<std::string>().size() > 0);
  // RILL_CPU_ISA caps the copy; OPENBLAS_CORETYPE picks the kernels (a core
  // OpenBLAS built for many targets offers on every x86-64 CPU).
  Ran capped = rill::testing::run_shell("RILL_CPU_ISA=baseline OPENBLAS_CORETYPE=Prescott " + rill::testing::binary() +
                                        " run " + root() +
                                        "/samples/linear_regression/linear_regression.json --steps 5 --result " +
                                        result_file.string());
  INFO(capped.output);
  REQUIRE(capped.code == 0);
  std::ifstream capped_in(result_file);
  const auto capped_result = nlohmann::json::parse(capped_in);
  CHECK(capped_result["cpu_kernels"]["loops"] == "baseline");
  // An OpenBLAS built for one target ignores OPENBLAS_CORETYPE and names its own.
  const std::string capped_blas = capped_result["cpu_kernels"]["blas"];
  CHECK((capped_blas == "Prescott" || capped_blas == result["cpu_kernels"]["blas"].get<std::string>()));
}

// rill run --nodes keeps its nodes' logs in a fresh private folder (or
// --logdir) and leaves no copy of the cluster key it made behind.
TEST_CASE("rill run --nodes leaves its logs and no cluster key behind") {
  const std::string job = root() + "/samples/linear_regression/linear_regression.json";
  const auto logs = temp_dir() / "nodes-logs";
  std::filesystem::remove_all(logs);
  Ran given = run_rill("run " + job + " --nodes 2 --ctrl-port 19740 --http 127.0.0.1:19745 --logdir " + logs.string());
  INFO(given.output);
  REQUIRE(given.code == 0);
  // --http places the master's dashboard; without --nodes there is none to place.
  CHECK(given.output.find("dashboard at http://127.0.0.1:19745/") != std::string::npos);
  // The submitter sees the job's opening lines, as one process prints them.
  CHECK(given.output.find("job 'linear_regression': 500 steps of global batch 4 on 2 node(s) x cpu:1") !=
        std::string::npos);
  Ran alone = run_rill("run " + job + " --http 127.0.0.1:19746");
  CHECK(alone.code == 1);
  CHECK(alone.output.find("--http places the local cluster's dashboard: it needs --nodes N") != std::string::npos);
  CHECK(std::filesystem::exists(logs / "node-1.log"));
  CHECK_FALSE(std::filesystem::exists(logs / "cluster.key"));
  // The default folder: made by mkdtemp (0700), its key gone at the end.
  const auto before = std::filesystem::file_time_type::clock::now();
  Ran fresh = run_rill("run " + job + " --nodes 2 --ctrl-port 19750");
  INFO(fresh.output);
  REQUIRE(fresh.code == 0);
  int made = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::temp_directory_path())) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rill-", 0) != 0 || name.size() != 11 || !entry.is_directory() ||
        std::filesystem::last_write_time(entry.path()) < before || !std::filesystem::exists(entry.path() / "node-1.log"))
      continue;
    ++made;
    CHECK_FALSE(std::filesystem::exists(entry.path() / "cluster.key"));
    CHECK((std::filesystem::status(entry.path()).permissions() & std::filesystem::perms::others_all) ==
          std::filesystem::perms::none);
  }
  CHECK(made >= 1);
}

// A resumed run says where it resumes; a checkpoint whose variable has
// another shape than the job's is refused naming both.
TEST_CASE("--resume says the step and folder it resumes from, and refuses a variable of another shape") {
  const std::string job = root() + "/samples/linear_regression/linear_regression.json";
  const auto dir = temp_dir() / "resume-ckpt";
  std::filesystem::remove_all(dir);
  Ran first = run_rill("run " + job + " --steps 20 --set checkpoint.dir=" + dir.string());
  INFO(first.output);
  REQUIRE(first.code == 0);
  Ran resumed = run_rill("run " + job + " --steps 30 --resume latest --set checkpoint.dir=" + dir.string());
  INFO(resumed.output);
  CHECK(resumed.code == 0);
  CHECK(resumed.output.find("resuming at step 20 from " + dir.string() + "/step-00000020 (1 variable(s); a "
                            "checkpoint holds whole tensors, so any layout resumes it)") != std::string::npos);
  nlohmann::json wide = nlohmann::json::parse(std::ifstream(job));
  for (auto& v : wide["variables"]) v["shape"] = {3, 1};  // three features: x gets a column of ones
  for (auto& in : wide["inputs"])
    if (in["name"] == "x") in["shape"] = {3};
  for (auto& t : wide["datasets"][0]["tensors"])
    if (t["name"] == "x") {
      t["shape"] = {4, 3};
      t["data"] = {1, 2, 1, 2, 3, 1, 4, 6, 1, 3, 1, 1};
    }
  const auto wide_job = temp_dir() / "wide.json";
  std::ofstream(wide_job) << wide.dump();
  Ran refused = run_rill("run " + wide_job.string() + " --steps 30 --resume " + dir.string());
  INFO(refused.output);
  CHECK(refused.code == 1);
  CHECK(refused.output.find("variable 'w' is [2, 1] there; the job declares [3, 1]") != std::string::npos);
  // Another optimizer's checkpoint: what the job's update reads and the
  // checkpoint lacks starts from zero, what it holds and nothing reads is
  // left, each said (the sample trains with sgd, which keeps no state).
  const auto adam_dir = temp_dir() / "resume-adam";
  std::filesystem::remove_all(adam_dir);
  Ran adam = run_rill("run " + job + " --steps 30 --resume " + dir.string() +
                      "/step-00000020 --set optimizer.type=adam --set checkpoint.dir=" + adam_dir.string());
  INFO(adam.output);
  CHECK(adam.code == 0);
  CHECK(adam.output.find("note: the checkpoint holds no adam_m, adam_v for 2 of 2 optimizer state tensor(s) of "
                         "'adam': they start from zero") != std::string::npos);
  Ran sgd = run_rill("run " + job + " --steps 40 --resume " + adam_dir.string() + "/step-00000030");
  INFO(sgd.output);
  CHECK(sgd.code == 0);
  CHECK(sgd.output.find("note: the checkpoint's adam_m, adam_v state is not read by 'sgd': left unused") !=
        std::string::npos);
  CHECK(resumed.output.find("note:") == std::string::npos);  // the same optimizer: nothing to say
}

// A checkpoint dir holding another run's steps is not mixed into: refused
// unless resuming or told to overwrite; the last line lists what is kept.
TEST_CASE("a checkpoint dir holding a run before this one is refused unless resuming or overwriting") {
  const std::string job = root() + "/samples/linear_regression/linear_regression.json";
  const auto dir = temp_dir() / "mixed-ckpt";
  std::filesystem::remove_all(dir);
  const std::string keep = " --set checkpoint.dir=" + dir.string() + " --set checkpoint.every=10 --set checkpoint.keep=2";
  Ran first = run_rill("run " + job + " --steps 30" + keep);
  INFO(first.output);
  REQUIRE(first.code == 0);
  CHECK(first.output.find("checkpoint step(s) 20, 30 kept in " + dir.string()) != std::string::npos);
  Ran again = run_rill("run " + job + " --steps 30" + keep);
  INFO(again.output);
  CHECK(again.code == 1);
  CHECK(again.output.find("checkpoint.dir '" + dir.string() + "' holds step(s) 20, 30 of a run before this one: "
                          "resume it (--resume latest), name another dir, or --set checkpoint.overwrite=true") !=
        std::string::npos);
  Ran replaced = run_rill("run " + job + " --steps 10" + keep + " --set checkpoint.overwrite=true");
  INFO(replaced.output);
  CHECK(replaced.code == 0);
  CHECK(replaced.output.find("checkpoint step(s) 10 kept in " + dir.string()) != std::string::npos);
  // Resuming from another run's folder does not make this one's steps its own.
  const auto other = temp_dir() / "other-ckpt";
  std::filesystem::remove_all(other);
  REQUIRE(run_rill("run " + job + " --steps 10 --set checkpoint.dir=" + other.string()).code == 0);
  Ran crossed = run_rill("run " + job + " --steps 20 --resume " + dir.string() + " --set checkpoint.dir=" + other.string());
  INFO(crossed.output);
  CHECK(crossed.code == 1);
  CHECK(crossed.output.find("checkpoint.dir '" + other.string() + "' holds step(s) 10 of a run before this one") !=
        std::string::npos);
}

// What a run is about to do that takes time or shapes it gets a line each:
// the micro-batches and schedule, the files it reads, the trace it writes,
// mixed precision and loss scaling.
TEST_CASE("rill run says how the step is cut, which files it reads and where the trace went") {
  const auto trace = temp_dir() / "trace.json";
  Ran ran = run_rill("run " + root() + "/samples/mlp/mlp.json --steps 2 --set train.micro_batches=2 --trace " +
                     trace.string());
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  CHECK(ran.output.find("1 stage(s), 2 micro-batch(es) of 128 rows per step, schedule 1f1b") != std::string::npos);
  CHECK(ran.output.find("reading dataset(s) 'train' (images ") != std::string::npos);
  // Acts counted as the file holds them (an event each), not the actors.
  std::smatch counted;
  const std::string out = ran.output;
  REQUIRE(std::regex_search(out, counted, std::regex("trace of (\\d+) act\\(s\\) of (\\d+) actor\\(s\\) written to")));
  const std::string written = rill::testing::read_text(trace.string());
  size_t events = 0;
  for (size_t at = written.find("\"ph\":\"X\""); at != std::string::npos; at = written.find("\"ph\":\"X\"", at + 1)) ++events;
  CHECK(std::stoul(counted[1]) == events);
  CHECK(std::stoul(counted[1]) > std::stoul(counted[2]));
  // Files a run writes at its end are found unwritable before it starts.
  for (const char* flag : {"--result", "--trace", "--metrics"}) {
    Ran refused = run_rill("run " + root() + "/samples/mlp/mlp.json --steps 2 " + flag + " /nonexistent/dir/out.json");
    INFO(refused.output);
    CHECK(refused.code == 1);
    CHECK(refused.output.find("cannot write the ") != std::string::npos);
    CHECK(refused.output.find("'/nonexistent/dir/out.json': its folder /nonexistent/dir does not exist") !=
          std::string::npos);
    CHECK(refused.output.find("step ") == std::string::npos);  // not one step ran
  }
  // Mixed precision says what it cast and how it scales: the MLP's 3
  // matmuls read x, h1, h2 and w1, w2, w3 through casts.
  ran = run_rill("run " + root() + "/samples/mlp/mlp.json --steps 2 --set train.precision=f16");
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  CHECK(ran.output.find("mixed precision: matmuls multiply f16 copies of their inputs (6 casts)") != std::string::npos);
  CHECK(ran.output.find("loss scaling: from 65536, halved on an overflow (the step skipped), doubled after 2000 good "
                        "steps") != std::string::npos);
  CHECK(ran.output.find("loss_scale 65536  skipped_steps 0") != std::string::npos);
}

// Nothing listens at the address: rill status says so at the first refusal,
// rill submit after 3 s of them (an agent started just before gets that
// long to listen); neither waits out its answer timeout (5 s and 10 s) as
// for a master that is silent.
TEST_CASE("rill submit and rill status to an address where nothing listens say so") {
  const std::string job = root() + "/samples/linear_regression/linear_regression.json";
  for (const auto& [args, lasting] :
       {std::pair{std::string("status --master 127.0.0.1:19899"), std::string(" ")},
        std::pair{"submit " + job + " --master 127.0.0.1:19899", std::string(" for 3 s ")}}) {
    CAPTURE(args);
    Ran ran = run_rill(args);
    CHECK(ran.code == 1);
    CHECK(ran.output.find("the master 127.0.0.1:19899 cannot be reached: the connection was refused or had no route" +
                          lasting + "(is its agent running, on this address?)") != std::string::npos);
  }
  // A bad --master is named as the flag the user gave, not as a machine list.
  Ran port = run_rill("status --master 127.0.0.1:abc");
  CHECK(port.output.find("--master '127.0.0.1:abc': port 'abc' is not a number") != std::string::npos);
  Ran empty = run_rill("status --master ''");
  CHECK(empty.output.find("--master names one address[:port], got ''") != std::string::npos);
  Ran zero = run_rill("run " + job + " --nodes 2 --ctrl-port 0");
  CHECK(zero.code != 0);
  CHECK(zero.output.find("--ctrl-port: Value 0 not in range 1 to 65534") != std::string::npos);
}

TEST_CASE("an unknown command is named, with the likeliest one") {
  Ran ran = run_rill("submitt job.json");
  CHECK(ran.code == 1);
  CHECK(ran.output.find("unknown command 'submitt' (did you mean 'submit'?); the commands: run, agent, submit") !=
        std::string::npos);
}

TEST_CASE("a bad flag value is an error, not a crash") {
  Ran ran = run_rill("run " + root() + "/samples/linear_regression/linear_regression.json --devices gpu:x");
  CHECK(ran.code == 1);
  CHECK(ran.output.find("gpu:x") != std::string::npos);
  // Counts and times are > 0: 0 steps is not "the job's steps", and a
  // negative timeout is not "none".
  for (const char* flag : {"--steps 0", "--stall-timeout -1"}) {
    Ran refused = run_rill("run " + root() + "/samples/linear_regression/linear_regression.json " + flag);
    INFO(refused.output);
    CHECK(refused.code != 0);
    CHECK(refused.output.find(": must be a finite number > 0, got ") != std::string::npos);
    CHECK(refused.output.find("step ") == std::string::npos);
  }
  // A mistake in a --set value is the assignment's, not the file line's,
  // and said once.
  Ran set = run_rill("run " + root() + "/samples/linear_regression/linear_regression.json --set optimizer.lr=-1");
  INFO(set.output);
  CHECK(set.output.find("linear_regression.json (--set optimizer.lr=-1): optimizer.lr must be a finite number > 0, "
                        "got -1") != std::string::npos);
  CHECK(set.output.find("min_lr") == std::string::npos);
}

// On a machine without a GPU (CI's), cuda devices are an error naming what
// was asked for, on rill run and on an agent's start, never a silent CPU run.
// (A build without CUDA refuses them when parsing; one with CUDA plans them,
// and refuses to run them where there is no GPU.)
TEST_CASE("cuda devices where there is no GPU: an error naming them, never a silent CPU run") {
  if (std::system("nvidia-smi -L > /dev/null 2>&1") == 0) {
    MESSAGE("this machine has a GPU: tests/runtime/cuda_runtime_test.cc covers it");
    return;
  }
  const std::string job = root() + "/samples/linear_regression/linear_regression.json";
  for (const std::string& args : {"run " + job + " --devices cuda:1", "run " + job + " --set train.devices=cuda:1"}) {
    CAPTURE(args);
    Ran ran = run_rill(args);
    INFO(ran.output);
    CHECK(ran.code != 0);
    CHECK(ran.output.find("cuda:1") != std::string::npos);
    CHECK((ran.output.find("0 CUDA device(s)") != std::string::npos ||
           ran.output.find("has no CUDA support") != std::string::npos));
  }
  Ran agent = run_rill("agent --machines 127.0.0.1:19390 --rank 0 --devices cuda:2");
  INFO(agent.output);
  CHECK(agent.code != 0);
  CHECK(agent.output.find("cuda:2") != std::string::npos);
}

// CUDA is a module the program loads when it first asks for a GPU: a copy
// of the program without the module beside it says so when asked for one,
// and still runs CPU jobs.
TEST_CASE("a program without its CUDA module says why it has no GPU, and runs CPU jobs") {
  const auto lonely = temp_dir() / "lonely";
  std::filesystem::create_directories(lonely);
  std::filesystem::copy_file(rill::testing::binary(), lonely / "rill",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string job = root() + "/samples/linear_regression/linear_regression.json";
  Ran ran = rill::testing::run_shell("RILL_CUDA_MODULE= " + (lonely / "rill").string() + " run " + job +
                                     " --devices cuda:1");
  INFO(ran.output);
  CHECK(ran.code != 0);
  CHECK((ran.output.find("the CUDA module librill_cuda.so is not beside the program") != std::string::npos ||
         ran.output.find("has no CUDA support") != std::string::npos));
  Ran cpu = rill::testing::run_shell((lonely / "rill").string() + " run " + job + " --devices cpu:1 --steps 20");
  INFO(cpu.output);
  CHECK(cpu.code == 0);
}

// Bad input that once crashed, hung or passed for success: each is an error
// naming what and where, with a non-zero exit.
TEST_CASE("bad input is a clear error: non-finite constants, overflowing step counts, a diverging loss") {
  const std::string lr = root() + "/samples/linear_regression/linear_regression.json";
  struct Case {
    std::string args, expected;
  };
  for (const Case& c : std::vector<Case>{
           {"check " + lr + " --set optimizer.lr=inf", "optimizer.lr"},
           {"run " + lr + " --set train.epochs=100000000000000000", "train.epochs must be in [0, 1099511627776]"},
           {"plan " + root() + "/samples/mlp/mlp.json --set train.epochs=10000000000", "is more than the most a job may run"},
           {"run " + lr + " --steps 2000000000000", "steps is 2000000000000, expected 0 to 1099511627776"},
           {"run " + lr + " --set optimizer.lr=1000", "the loss is inf at step"},
       }) {
    CAPTURE(c.args);
    Ran ran = run_rill(c.args);
    INFO(ran.output);
    CHECK(ran.code != 0);
    CHECK(ran.output.find(c.expected) != std::string::npos);
  }
  // A NaN written in the job file itself.
  auto job = temp_dir() / "nan.json";
  std::ofstream(job) << R"({"name": "nan", "datasets": [{"name": "d", "kind": "synthetic", "num_samples": 64,
    "feature_shape": [2]}], "inputs": [{"name": "x", "dataset": "d", "field": "features", "shape": [2]}],
    "variables": [{"name": "w", "shape": [2, 1], "init": {"type": "fill", "value": nan}}],
    "ops": [{"name": "y", "type": "matmul", "inputs": ["x", "w"]}, {"name": "loss", "type": "reduce_mean", "inputs": ["y"]}],
    "loss": "loss", "optimizer": {"type": "sgd", "lr": 0.1}, "train": {"steps": 5, "batch_size": 8}})";
  Ran ran = run_rill("check " + job.string());
  INFO(ran.output);
  CHECK(ran.code != 0);
  CHECK(ran.output.find("variables[0] (w): init: op 'fill': attribute 'value' is nan; it must be finite") !=
        std::string::npos);
}

TEST_CASE("a FIFO as job file, or an unwritable checkpoint directory, is refused before any step; a FIFO dataset is read") {
  auto dir = temp_dir();
  auto fifo = dir / "fifo";
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  Ran job = run_rill("run " + fifo.string());
  INFO(job.output);
  CHECK(job.code != 0);
  CHECK(job.output.find("not a regular file (a FIFO)") != std::string::npos);

  // A shell's process substitution, or anything that writes the FIFO.
  Ran data = rill::testing::run_shell("(sleep 1; cat /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz > " +
                                      fifo.string() + ") & " + rill::testing::binary() + " run " + root() +
                                      "/samples/mlp/mlp.json --steps 1 --set datasets.train.images=" + fifo.string());
  INFO(data.output);
  CHECK(data.code == 0);
  CHECK(data.output.find("step      1/1") != std::string::npos);
  // Without steps, counting the samples of an epoch would drain the pipe.
  Ran epochs = run_rill("run " + root() + "/samples/mlp/mlp.json --set datasets.train.images=" + fifo.string());
  CHECK(epochs.code != 0);
  CHECK(epochs.output.find("is a pipe, so its samples cannot be counted ahead: give train.steps") != std::string::npos);

  auto file = dir / "a-file";
  std::ofstream(file) << "x";
  Ran ckpt = run_rill("run " + root() + "/samples/linear_regression/linear_regression.json --set checkpoint.dir=" +
                      (file / "ckpt").string());
  INFO(ckpt.output);
  CHECK(ckpt.code != 0);
  CHECK(ckpt.output.find("checkpoint.dir: cannot create") != std::string::npos);
  CHECK(ckpt.output.find("step ") == std::string::npos);  // no step ran
}

TEST_CASE("rill run honours the job's train.devices when --devices is not given") {
  Ran ran = run_rill("run " + root() + "/samples/linear_regression/linear_regression.json --set train.devices=cpu:2");
  INFO(ran.output);
  CHECK(ran.code == 0);
  CHECK(ran.output.find("on 1 node(s) x cpu:2") != std::string::npos);
  CHECK(ran.output.find("devices from") == std::string::npos);  // the job's own: nothing to say
  // Devices other than the job's are named with who chose them.
  Ran flag = run_rill("run " + root() + "/samples/linear_regression/linear_regression.json --devices cpu:2");
  CHECK(flag.output.find("x cpu:2 (18 tasks, devices from --devices; the job's train.devices is cpu:1)") !=
        std::string::npos);
  Ran agents = run_rill("run " + root() + "/samples/linear_regression/linear_regression.json --nodes 2 "
                        "--devices cpu:2 --ctrl-port 19340 --http 127.0.0.1:0 --set train.devices=cpu:1");
  INFO(agents.output);
  CHECK(agents.output.find("devices from the submit's --devices; the job's train.devices is cpu:1") !=
        std::string::npos);
}

TEST_CASE("the local cluster's flags without --nodes are refused, not ignored") {
  for (const char* flag : {"--logdir /tmp/unused", "--ctrl-port 19999"}) {
    CAPTURE(flag);
    Ran ran = run_rill("run " + root() + "/samples/linear_regression/linear_regression.json " + flag);
    CHECK(ran.code == 1);
    CHECK(ran.output.find("places the local cluster's agents: it needs --nodes N") != std::string::npos);
  }
}

// Metrics as JSON lines (one per logged step, as pandas.read_json(lines=True)
// reads them), from one process and from a local cluster's master, and
// `rill plot` drawing them and a result's loss curve.
TEST_CASE("metrics go to a JSON-lines file, and rill plot draws them and a result's loss curve to a PNG") {
  auto dir = temp_dir() / "metrics";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Ran ran = run_rill("run " + root() + "/samples/linear_regression/linear_regression.json --metrics " +
                     (dir / "lr.jsonl").string() + " --result " + (dir / "lr.json").string());
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  std::ifstream in(dir / "lr.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  REQUIRE(lines.size() == 11);  // the run's line, then 500 steps logged every 50
  CHECK(lines[0]["run"] == "linear_regression");
  CHECK(lines[0]["start_step"] == 0);
  CHECK(lines[0]["steps"] == 500);
  lines.erase(lines.begin());
  CHECK(lines[0]["step"] == 50);
  CHECK(lines[9]["step"] == 500);
  CHECK(lines[9]["loss"].get<double>() < 1e-6);
  CHECK(lines[0]["lr"] == 0.01);
  CHECK(lines[0]["samples_per_sec"].get<double>() > 0);

  Ran cluster = run_rill("run " + root() + "/samples/linear_regression/linear_regression.json --nodes 2 "
                         "--ctrl-port 19330 --logdir " + (dir / "logs").string());
  INFO(cluster.output);
  REQUIRE(cluster.code == 0);
  std::ifstream master(dir / "logs" / "job-1.jsonl");
  std::string first;
  REQUIRE(std::getline(master, first));
  CHECK(nlohmann::json::parse(first)["run"] == "linear_regression");
  REQUIRE(std::getline(master, first));
  CHECK(nlohmann::json::parse(first)["step"] == 50);
  CHECK(nlohmann::json::parse(first).contains("nodes"));

  // A run shorter than log_every logs one line: a file that is one JSON object.
  {
    std::ofstream one(dir / "one.jsonl");
    one << lines[0].dump() << "\n";
  }
  for (const char* input : {"lr.jsonl", "lr.json", "one.jsonl"}) {
    CAPTURE(input);
    const auto png = dir / (std::string(input) + ".png");
    Ran plot = run_rill("plot " + (dir / input).string() + " -o " + png.string());
    INFO(plot.output);
    CHECK(plot.code == 0);
    const std::string bytes = rill::testing::read_text(png.string());
    CHECK(bytes.size() > 1000);
    CHECK(bytes.substr(0, 8) == "\x89PNG\r\n\x1a\n");
  }
  // A second run appends to the file: plotted apart, not as one zig-zag line.
  REQUIRE(run_rill("run " + root() + "/samples/linear_regression/linear_regression.json --steps 100 --metrics " +
                   (dir / "lr.jsonl").string()).code == 0);
  Ran two = run_rill("plot " + (dir / "lr.jsonl").string() + " -o " + (dir / "two.png").string());
  INFO(two.output);
  CHECK(two.code == 0);
  CHECK(two.output.find("loss over 12 points, steps 50 to 500, 2 runs drawn apart") != std::string::npos);
  Ran bad = run_rill("plot " + root() + "/samples/mlp/mlp.json");
  CHECK(bad.code == 1);
  CHECK(bad.output.find("a JSON object without a loss_curve (not a Rill result)") != std::string::npos);
  // An output it cannot write is one line naming it, never a traceback.
  for (const std::string& out : {std::string("/nonexistent/loss.png"), (dir / "loss.txt").string()}) {
    Ran unwritten = run_rill("plot " + (dir / "lr.jsonl").string() + " -o " + out);
    INFO(unwritten.output);
    CHECK(unwritten.code == 1);
    CHECK(unwritten.output.find("rill plot: cannot write " + out + ": ") != std::string::npos);
    CHECK(unwritten.output.find("Traceback") == std::string::npos);
  }
  // A metrics line without its loss is named as a metrics line.
  std::ofstream(dir / "stepped.jsonl") << "{\"step\": 1}\n";
  Ran stepped = run_rill("plot " + (dir / "stepped.jsonl").string() + " -o " + (dir / "s.png").string());
  CHECK(stepped.output.find("stepped.jsonl:1: a metrics line needs 'step' and 'loss'") != std::string::npos);
}

// On a terminal (here a pseudo-terminal from util-linux's `script`) the
// progress bar is redrawn in place between the logged lines; piped, only
// the lines are printed.
TEST_CASE("rill run shows a progress bar on a terminal and plain lines when piped") {
  const std::string run = rill::testing::binary() + " run " + root() + "/samples/mlp/mlp.json --steps 120";
  Ran tty = rill::testing::run_shell("script -qec '" + run + "' /dev/null");
  INFO(tty.output);
  REQUIRE(tty.code == 0);
  CHECK(tty.output.find("\r\033[K[") != std::string::npos);
  CHECK(tty.output.find("/120  ") != std::string::npos);
  CHECK(tty.output.find("ETA 0:") != std::string::npos);
  CHECK(tty.output.find("step    120/120") != std::string::npos);
  Ran piped = rill::testing::run_shell(run + " | cat");
  CHECK(piped.code == 0);
  CHECK(piped.output.find("\033[K") == std::string::npos);
  CHECK(piped.output.find("step     50/120") != std::string::npos);
}

// rill generate: the bytes a run prints at its end, from its checkpoint
// alone (the same variables, the same sampler and seed: the same bytes on
// any CPU, as the run's own generation is the same computation); flags
// override the job's settings; a job without a generate section, or a
// checkpoint that is not there, is refused by name.
TEST_CASE("rill generate samples from a checkpoint what the run printed at its end") {
  const auto dir = temp_dir() / "gpt_ckpt";
  std::filesystem::remove_all(dir);
  const std::string job = root() + "/samples/gpt/gpt_moby.json";
  // From the tree's root, where the sample's data/moby-dick.txt is.
  auto run_rill = [](const std::string& args) {
    return rill::testing::run_shell("cd " + root() + " && " + rill::testing::binary() + " " + args);
  };
  Ran ran = run_rill("run " + job + " --steps 3 --set checkpoint.dir=" + dir.string());
  INFO(ran.output);
  REQUIRE(ran.code == 0);
  const std::string head = "generated (300 bytes after the prompt):\n";
  const size_t from = ran.output.find(head);
  const size_t to = ran.output.find("\ndone:", from);
  REQUIRE(from != std::string::npos);
  REQUIRE(to != std::string::npos);
  const std::string printed = ran.output.substr(from + head.size(), to - from - head.size());
  CHECK(printed.rfind("Call me Ishmael. ", 0) == 0);

  Ran again = run_rill("generate " + job + " --checkpoint " + dir.string());
  INFO(again.output);
  REQUIRE(again.code == 0);
  const std::string said = "generated (300 bytes after the prompt) from step 3 of " + dir.string() + ":\n";
  REQUIRE(again.output.find(said) != std::string::npos);
  CHECK(again.output.substr(again.output.find(said) + said.size()) == printed + "\n");

  // Greedy from another prompt: the same bytes twice, the prompt first.
  const std::string greedy = "generate " + job + " --checkpoint " + dir.string() +
                             "/step-00000003 --prompt 'The whale' --tokens 12 --temperature 0";
  Ran one = run_rill(greedy), two = run_rill(greedy);
  CHECK(one.code == 0);
  CHECK(one.output == two.output);
  CHECK(one.output.find("from step 3 of " + dir.string() + "/step-00000003:\nThe whale") != std::string::npos);

  Ran no_section = run_rill("generate " + root() + "/samples/linear_regression/linear_regression.json --checkpoint " +
                            dir.string());
  CHECK(no_section.code != 0);
  CHECK(no_section.output.find("has no generate section") != std::string::npos);
  Ran no_checkpoint = run_rill("generate " + job + " --checkpoint " + (dir / "nothing").string());
  CHECK(no_checkpoint.code != 0);
  CHECK(no_checkpoint.output.find((dir / "nothing").string()) != std::string::npos);
}
