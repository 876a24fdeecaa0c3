// Interrupting a run as a user does: Ctrl-C typed on the terminal the run
// owns (or SIGTERM) stops the job at a step boundary on every node, writes
// its checkpoint there, says what it kept, and exits 128 + the signal; the
// run resumes from it. A second Ctrl-C stops at once.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdlib>
#include <functional>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "checkpoint_values.h"
#include "key_util.h"
#include "process_util.h"
#include "run_results.h"

namespace {

using rill::testing::binary;
using rill::testing::Ran;
using rill::testing::read_json;
using rill::testing::root;
using rill::testing::run_rill;
using rill::testing::run_shell;
using rill::testing::step_folder;
using rill::testing::Terminal;

std::filesystem::path temp_dir() { return rill::testing::temp_dir("rill-interrupt-"); }

// The linear regression for as many steps as it could want: only a stop ends it.
std::string endless(const std::filesystem::path& dir) {
  return root() + "/samples/linear_regression/linear_regression.json --steps 100000000 --set train.log_every=1000000 " +
         "--set checkpoint.dir=" + dir.string() + " --set checkpoint.every=1000000";
}

// The step the run says it stopped at ("interrupted at step N of M").
int64_t stopped_at(const std::string& output) {
  std::smatch m;
  REQUIRE(std::regex_search(output, m, std::regex("interrupted at step (\\d+) of 100000000")));
  return std::stoll(m[1]);
}

// What every stopped run must show: the step it stopped at is a checkpoint
// (the last one: `latest` names it), the result says so, and a resumed run
// begins there.
void check_stopped(const std::string& output, const std::filesystem::path& dir, const std::filesystem::path& result) {
  const int64_t step = stopped_at(output);
  CHECK(step > 0);
  CHECK(output.find("checkpoint step(s) " + std::to_string(step) + " kept in " + dir.string()) != std::string::npos);
  CHECK(rill::testing::checkpoint_complete(dir, step));
  CHECK(rill::testing::read_text((dir / "latest").string()).find(step_folder(step)) != std::string::npos);
  auto j = read_json(result);
  CHECK(j["interrupted"] == true);
  CHECK(j["steps"] == step);
  CHECK(j["planned_steps"] == 100000000);
  // Its metrics are the step it stopped at, though no line logged it.
  CHECK(j["train_metrics"]["loss"] == j["final_loss"]);
  Ran resumed = run_rill("run " + root() + "/samples/linear_regression/linear_regression.json --steps " +
                         std::to_string(step + 5) + " --set checkpoint.dir=" + dir.string() + " --resume latest");
  INFO(resumed.output);
  CHECK(resumed.code == 0);
  CHECK(resumed.output.find("resuming at step " + std::to_string(step)) != std::string::npos);
}

// `rill run` of the endless job (with `flags`) on a terminal of its own,
// stopped by `interrupt` once well into its steps: its exit code must be
// `code`, and it must have kept what check_stopped checks. Its output.
std::string run_and_interrupt(const std::string& name, const std::string& flags,
                              const std::function<void(Terminal&)>& interrupt, int code) {
  auto dir = temp_dir() / name;
  std::filesystem::remove_all(dir);
  auto result = temp_dir() / (name + ".json");
  Terminal run(binary() + " run " + endless(dir) + flags + " --result " + result.string());
  REQUIRE_MESSAGE(run.wait_for("job 'linear_regression'", 60), run.output());
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // well into its steps
  interrupt(run);
  const int ended = run.finish(60);
  INFO(run.output());
  CHECK(ended == code);
  check_stopped(run.output(), dir, result);
  return run.output();
}

void type_ctrl_c(Terminal& run) { run.type("\x03"); }

}  // namespace

TEST_CASE("Ctrl-C on rill run stops at a step boundary with a checkpoint there, says so, exits 130") {
  const std::string output = run_and_interrupt("one", "", type_ctrl_c, 130);
  CHECK(output.find("interrupted: stopping the job after the step under way") != std::string::npos);
}

TEST_CASE("SIGTERM stops rill run the same way, and exits 143") {
  run_and_interrupt("term", "", [](Terminal& run) { kill(run.pid(), SIGTERM); }, 143);
}

// A checkpoint from 2 nodes resumes on one (check_stopped): it holds whole tensors.
TEST_CASE("Ctrl-C on rill run --nodes 2 stops every node at one step, saves it, and the agents go with the run") {
  const std::string output =
      run_and_interrupt("nodes", " --nodes 2 --devices cpu:1 --ctrl-port 9941 --http 127.0.0.1:0", type_ctrl_c, 130);
  INFO(output);
  CHECK(output.find("every node stops at step " + std::to_string(stopped_at(output))) != std::string::npos);
  // The agents ended with the run (they were not killed by the terminal's
  // signal: they saw the job to its end).
  Ran left = run_shell("pgrep -af 'agent --machines 127[.]0[.]0[.]1:9941' || true");
  CHECK(left.output.empty());
}

TEST_CASE("a second Ctrl-C stops at once, even where no step boundary comes (data that never arrives)") {
  auto dir = temp_dir() / "stuck";
  std::filesystem::create_directories(dir);
  const auto fifo = dir / "never.csv";
  std::filesystem::remove(fifo);
  REQUIRE(run_shell("mkfifo " + fifo.string()).code == 0);
  // Kept open for writing by nobody: the run waits for its data forever.
  Terminal run(binary() + " run " + root() + "/samples/mlp/mlp.json --steps 10 --set datasets.train.images=" +
               fifo.string());
  REQUIRE_MESSAGE(run.wait_for("reading dataset", 60), run.output());
  run.type("\x03");
  REQUIRE_MESSAGE(run.wait_for("interrupted: stopping", 10), run.output());
  const auto typed = std::chrono::steady_clock::now();
  run.type("\x03");
  const int code = run.finish(10);
  INFO(run.output());
  CHECK(code == 130);
  CHECK(run.output().find("stopped at once") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - typed < std::chrono::seconds(5));
}

TEST_CASE("rill stop ends a submitted job at a step boundary on every node; rill shutdown ends the agents") {
  auto dir = temp_dir() / "submitted";
  std::filesystem::remove_all(dir);
  const std::string machines = " --machines 127.0.0.1:9943,127.0.0.2:9943 --devices cpu:1";
  rill::testing::Agent node0(machines + " --rank 0 --http 127.0.0.1:0", (temp_dir() / "node0.log").string());
  rill::testing::Agent node1(machines + " --rank 1", (temp_dir() / "node1.log").string());
  rill::testing::wait_formed("127.0.0.1:9943", "");  // a master not listening yet is reported at once
  Ran idle = run_rill("stop --master 127.0.0.1:9943", 30);
  CHECK(idle.code == 0);
  CHECK(idle.output.find("no job is running: nothing to stop") != std::string::npos);
  Ran other = run_rill("stop --master 127.0.0.1:9943 --job 7", 30);
  CHECK(other.code == 1);
  CHECK(other.output.find("job 7 is not running") != std::string::npos);
  Terminal submit(binary() + " submit " + endless(dir) + " --master 127.0.0.1:9943 --result " +
                  (temp_dir() / "submitted.json").string());
  // Running on both nodes: its checkpoint dir is claimed once it starts.
  REQUIRE_MESSAGE(rill::testing::Terminal::poll_until([&] { return std::filesystem::exists(dir); }, 60), submit.output());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Ran stop = run_rill("stop --master 127.0.0.1:9943", 30);
  INFO(stop.output);
  CHECK(stop.code == 0);
  CHECK(stop.output.find("job 1 ('linear_regression') stops at the next step boundary") != std::string::npos);
  CHECK(submit.finish(60) == 0);
  INFO(submit.output());
  CHECK(submit.output().find("job 1 stopped at step") != std::string::npos);
  Ran status = run_rill("status --master 127.0.0.1:9943", 30);
  CHECK(status.output.find("finished: job 1 (linear_regression) ok: interrupted at step") != std::string::npos);
  check_stopped(status.output, dir, temp_dir() / "submitted.json");
  Ran down = run_rill("shutdown --master 127.0.0.1:9943", 30);
  CHECK(down.code == 0);
  CHECK(node0.wait(15) == 0);
  CHECK(node1.wait(15) == 0);
}

TEST_CASE("a third Ctrl-C ends rill run --nodes at once, its agents with it, and no cluster key is left behind") {
  auto dir = temp_dir() / "third";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto fifo = dir / "never.gz";
  REQUIRE(run_shell("mkfifo " + fifo.string()).code == 0);
  // The data never comes: the run never begins, so no step boundary comes.
  Terminal run(binary() + " run " + root() + "/samples/mlp/mlp.json --steps 10 --nodes 2 --devices cpu:1 " +
               "--ctrl-port 9945 --http 127.0.0.1:0 --logdir " + (dir / "logs").string() +
               " --set datasets.train.images=" + fifo.string());
  REQUIRE_MESSAGE(run.wait_for("reading dataset", 60), run.output());
  // The cluster's key is in memory no path names (a memfd the agents inherit).
  CHECK_FALSE(std::filesystem::exists(dir / "logs" / "cluster.key"));
  for (const char* said : {"interrupted: stopping", "interrupted again: stopping at once"}) {
    const size_t from = run.output().size();
    run.type("\x03");
    REQUIRE_MESSAGE(run.wait_for(said, 10, from), run.output());
  }
  run.type("\x03");
  const int code = run.finish(10);
  INFO(run.output());
  CHECK(code == 130);
  CHECK(run.output().find("interrupted again: stopped at once") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "logs" / "cluster.key"));
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = run_shell("pgrep -af 'agent --machines 127[.]0[.]0[.]1:9945' || true").output.empty();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(gone);
}

// Ctrl-C typed on a launcher's terminal reaches its programs from the
// terminal itself (one foreground group): the launcher counts it but does
// not pass it on again, so a program that stops gently on its first SIGINT
// and at once on its second sees one.
TEST_CASE("Ctrl-C on a launcher of programs reaches each program once") {
  const auto script = temp_dir() / "gentle.sh";
  std::ofstream(script) << "i=0; n=0\n"
                           "trap 'n=$((n+1)); echo \"program got SIGINT $n\"' INT\n"
                           "while [ $n -lt 2 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done\n"
                           "echo \"program ends after $n\"\n";
  Terminal launched(binary() + " launch --http off --master_port 19790 /bin/sh " + script.string());
  REQUIRE_MESSAGE(launched.wait_for("launch: nnodes=1", 30), launched.output());
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // the program is in its loop
  launched.type("\x03");
  CHECK_MESSAGE(launched.wait_for("program got SIGINT 1", 10), launched.output());
  CHECK_MESSAGE(launched.wait_for("program ends after 1", 20), launched.output());  // its loop ran out: no second
  launched.finish(30);
  CHECK(launched.output().find("program got SIGINT 2") == std::string::npos);
  // The launcher saw where it came from (two signals so close may merge, so
  // the program's count alone could not tell).
  CHECK(launched.output().find("rill: interrupted: the launched processes and the agent stop too") !=
        std::string::npos);
  CHECK(launched.output().find("passed on") == std::string::npos);
}
