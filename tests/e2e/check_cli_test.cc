// `rill check` as a user runs it: the job as `rill run` takes it, its data
// files read where they can be (a pipe never waited on), the index fields
// against the ops reading them, and --nodes held to the job.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "process_util.h"

namespace {

using rill::testing::Ran;
using rill::testing::root;
using rill::testing::run_rill;
std::filesystem::path temp_dir() { return ::rill::testing::temp_dir("rill-check-"); }

}  // namespace

TEST_CASE("rill check accepts the samples and rejects a bad file with its name") {
  CHECK(run_rill("check " + root() + "/samples/mlp/mlp.json").code == 0);
  CHECK(run_rill("check " + root() + "/samples/mlp/mlp_model_parallel.json").code == 0);
  CHECK(run_rill("check " + root() + "/samples/mlp/mlp_stages.json").code == 0);
  CHECK(run_rill("check " + root() + "/samples/pserver/mlp_pserver.json").code == 0);
  CHECK(run_rill("check " + root() + "/samples/pserver/ctr_lookup.json").code == 0);
  // A layout one node cannot hold is a note without --nodes, not an error.
  Ran layout = run_rill("check " + root() + "/samples/pserver/mlp_pserver.json --set distributed.pservers=0 "
                        "--set distributed.trainers=1");
  INFO(layout.output);
  CHECK(layout.code == 0);
  CHECK(layout.output.find("note: indices are checked where the job runs, or here with --nodes") !=
        std::string::npos);
  auto bad = temp_dir() / "bad.json";
  std::ofstream(bad) << "{ \"name\": \"x\", \"ops\": [ { \"type\": ";
  Ran ran = run_rill("check " + bad.string());
  CHECK(ran.code == 1);
  CHECK(ran.output.find("bad.json") != std::string::npos);
  // --set as rill run takes it: applied, then checked.
  Ran zero = run_rill("check " + root() + "/samples/mlp/mlp.json --set train.batch_size=0");
  CHECK(zero.code == 1);
  CHECK(zero.output.find("train.batch_size must be > 0, got 0") != std::string::npos);
  CHECK(run_rill("check " + root() + "/samples/mlp/mlp.json --set train.steps=5").code == 0);
  Ran missing = run_rill("run /nonexistent/job.json");
  CHECK(missing.code == 1);
  CHECK(missing.output.find("/nonexistent/job.json") != std::string::npos);
}

// What the run would refuse, rill check refuses first: a training batch
// larger than its dataset (the first step fails), an eval batch larger than
// the eval dataset (the eval pass fails, after every training step), and
// generate.logits naming a tensor that is not the byte model's logits.
TEST_CASE("rill check refuses batches larger than their datasets, and generation from non-byte logits") {
  const std::string mlp = root() + "/samples/mlp/mlp.json";
  Ran train = run_rill("check " + mlp + " --set train.batch_size=100000");
  CHECK(train.code == 1);
  CHECK(train.output.find("the global batch 100000 is larger than dataset 'train' (60000 samples): the first step "
                          "would fail; lower train.batch_size") != std::string::npos);
  Ran eval = run_rill("check " + mlp + " --set eval.batch_size=20000");
  CHECK(eval.code == 1);
  CHECK(eval.output.find("the eval batch 20000 is larger than dataset 'test' (10000 samples): the eval pass would "
                         "fail after training; lower eval.batch_size") != std::string::npos);
  CHECK(run_rill("check " + mlp + " --set eval.batch_size=10000").code == 0);
  nlohmann::json gpt = nlohmann::json::parse(std::ifstream(root() + "/samples/gpt/gpt_moby.json"));
  gpt["generate"]["logits"] = "lnf";
  for (auto& d : gpt["datasets"]) d["path"] = root() + "/" + d["path"].get<std::string>();
  const auto wrong = temp_dir() / "gpt_wrong_logits.json";
  std::ofstream(wrong) << gpt.dump();
  Ran logits = run_rill("check " + wrong.string());
  INFO(logits.output);
  CHECK(logits.code == 1);
  CHECK(logits.output.find("generate.logits: 'lnf' is f32 [") != std::string::npos);
}

// A job's relative data paths are read from the working folder of the run
// (or agent): an error about one names that folder.
TEST_CASE("an error about a relative data path names the working folder it was read from") {
  const std::string mlp = root() + "/samples/mlp/mlp.json", cwd = std::filesystem::current_path().string();
  Ran run = run_rill("run " + mlp + " --steps 1 --set datasets.train.images=nope/images.gz");
  INFO(run.output);
  CHECK(run.code == 1);
  CHECK(run.output.find("'nope/images.gz' (relative to the working folder " + cwd + "): cannot open") !=
        std::string::npos);
  Ran check = run_rill("check " + mlp + " --set datasets.train.images=nope/images.gz");
  INFO(check.output);
  CHECK(check.output.find("'nope/images.gz' (relative to the working folder " + cwd + ") does not exist here") !=
        std::string::npos);
}

// rill check reads the heads of the data files: an input declared with
// another size than the images hold is refused before any run; a file it
// cannot read here is a note, not an error (the run checks where it runs).
TEST_CASE("rill check compares the inputs with what the data files hold") {
  nlohmann::json job = nlohmann::json::parse(std::ifstream(root() + "/samples/mlp/mlp.json"));
  for (auto& in : job["inputs"])
    if (in["name"] == "x") in["shape"] = {700};
  for (auto& v : job["variables"])
    if (v["name"] == "w1") v["shape"] = {700, 512};
  const auto narrow = temp_dir() / "narrow.json";
  std::ofstream(narrow) << job.dump();
  Ran ran = run_rill("check " + narrow.string());
  INFO(ran.output);
  CHECK(ran.code == 1);
  CHECK(ran.output.find("input 'x' reads field 'image' of dataset 'train'") != std::string::npos);
  CHECK(ran.output.find("the job declares [700] f32 per sample, the data holds [784] f32") != std::string::npos);
  job["datasets"][0]["images"] = "/nonexistent/images.gz";
  const auto absent = temp_dir() / "absent.json";
  std::ofstream(absent) << job.dump();
  Ran noted = run_rill("check " + absent.string());
  INFO(noted.output);
  CHECK(noted.code == 0);
  CHECK(noted.output.find("note: dataset 'train': '/nonexistent/images.gz' does not exist here") != std::string::npos);
}

// What rill check can read here it reads whole, as the run would: a labels
// file of another length than the images, or an images file where the
// labels go, is an error before any run; a pipe is never waited on (the
// run reads it as a stream); a cluster named with --nodes that cannot hold
// the job's placements is an error, not a note.
TEST_CASE("rill check refuses data files the run would refuse, never waits on a pipe, and holds --nodes to the job") {
  const std::string mlp = root() + "/samples/mlp/mlp.json";
  Ran shorter = run_rill("check " + mlp +
                         " --set datasets.train.labels=/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
  INFO(shorter.output);
  CHECK(shorter.code == 1);
  CHECK(shorter.output.find("has 60000 images but labels file") != std::string::npos);
  CHECK(shorter.output.find("has 10000 labels") != std::string::npos);
  Ran swapped = run_rill("check " + mlp +
                         " --set datasets.train.labels=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
  INFO(swapped.output);
  CHECK(swapped.code == 1);
  CHECK(swapped.output.find("wrong magic number: expected 0x00000801 (an idx labels file)") != std::string::npos);
  const auto pipe = temp_dir() / "check.pipe";
  std::filesystem::remove(pipe);
  REQUIRE(::mkfifo(pipe.c_str(), 0600) == 0);
  Ran piped = run_rill("check " + mlp + " --set datasets.train.images=" + pipe.string(), 60);
  INFO(piped.output);
  CHECK(piped.code == 0);
  CHECK(piped.output.find("is not a regular file (a pipe or a device), read as a stream where the job runs") !=
        std::string::npos);
  std::filesystem::remove(pipe);
  Ran three = run_rill("check " + root() + "/samples/mlp/mlp_pipeline3.json --nodes 2");
  INFO(three.output);
  CHECK(three.code == 1);
  CHECK(three.output.find("names node 2, but the cluster has 2 node(s)") != std::string::npos);
  CHECK(run_rill("check " + root() + "/samples/mlp/mlp_pipeline3.json --nodes 3").code == 0);
}

// Labels are indices: rill check runs the sources' check on the job's plan
// over the data it can read, and a label past the classes is named with
// its sample (Fashion-MNIST's labels 0-9 against a 5-class head).
TEST_CASE("rill check names a label outside the classes, before any run") {
  nlohmann::json job = nlohmann::json::parse(std::ifstream(root() + "/samples/mlp/mlp.json"));
  for (auto& v : job["variables"]) {
    if (v["name"] == "w3") v["shape"] = {512, 5};
    if (v["name"] == "b3") v["shape"] = {5};
  }
  const auto five = temp_dir() / "five.json";
  std::ofstream(five) << job.dump();
  Ran ran = run_rill("check " + five.string());
  INFO(ran.output);
  CHECK(ran.code == 1);
  CHECK(ran.output.find("input 'y' reads field 'label' of dataset 'train': value ") != std::string::npos);
  CHECK(ran.output.find(", element 0 is not in [0, 5), the indices op ") != std::string::npos);
}
