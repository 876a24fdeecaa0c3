// Allowed roots: what a submitted job may make an agent read and write.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <doctest/doctest.h>

#include "runtime/cluster/allowed_roots.h"

using namespace rill;
namespace fs = std::filesystem;

namespace {

struct Tree {
  fs::path base = fs::temp_directory_path() / fmt::format("rill-roots-{}", ::getpid());
  Tree() {
    fs::remove_all(base);
    fs::create_directories(base / "data" / "sub");
    fs::create_directories(base / "ckpt");
    fs::create_directories(base / "outside");
    std::ofstream(base / "outside" / "secret.csv") << "1,2\n";
    fs::create_symlink(base / "outside", base / "data" / "escape");  // a link out of the root
  }
  ~Tree() { fs::remove_all(base); }
  std::string at(const std::string& p) const { return (base / p).string(); }
};

graph::Job job_reading(const std::string& csv, const std::string& checkpoint_dir = "") {
  graph::Job job;
  graph::Dataset d;
  d.name = "train";
  d.kind = "csv";
  d.path = csv;
  job.datasets.push_back(d);
  job.checkpoint.dir = checkpoint_dir;
  return job;
}

}  // namespace

TEST_CASE("a path is under a root by whole components, after links are resolved") {
  Tree t;
  CHECK(path_under(t.at("data/sub/x.csv"), t.at("data")));
  CHECK(path_under(t.at("data"), t.at("data")));
  CHECK(path_under(t.at("data/sub/../x.csv"), t.at("data")));
  CHECK_FALSE(path_under(t.at("data/../outside/secret.csv"), t.at("data")));
  CHECK_FALSE(path_under(t.at("data-other/x.csv"), t.at("data")));  // a prefix of the name is not a parent
  CHECK_FALSE(path_under(t.at("data/escape/secret.csv"), t.at("data")));  // the link leads outside
}

TEST_CASE("jobs are checked against the roots: datasets, checkpoint folder, resume; errors name them") {
  Tree t;
  auto roots = AllowedRoots::make({t.at("data")}, {t.at("ckpt")});
  REQUIRE(roots.ok());
  CHECK(check_job_paths(job_reading(t.at("data/sub/a.csv"), t.at("ckpt/run1")), "latest", *roots, "node 0").ok());
  Status data = check_job_paths(job_reading(t.at("outside/secret.csv")), "", *roots, "node 0");
  CHECK(data.code() == Code::kPermissionDenied);
  CHECK(data.message().find("node 0: dataset 'train' path '" + t.at("outside/secret.csv") + "' is outside") !=
        std::string::npos);
  CHECK(data.message().find("--data-root") != std::string::npos);
  CHECK(check_job_paths(job_reading(t.at("data/escape/secret.csv")), "", *roots, "n").code() ==
        Code::kPermissionDenied);
  Status ckpt = check_job_paths(job_reading(t.at("data/a.csv"), t.at("outside/ck")), "", *roots, "node 0");
  CHECK(ckpt.code() == Code::kPermissionDenied);
  CHECK(ckpt.message().find("checkpoint.dir") != std::string::npos);
  // A node that does not write checkpoints checks only its data.
  CHECK(check_job_paths(job_reading(t.at("data/a.csv"), t.at("outside/ck")), "", *roots, "node 1", false).ok());
  Status resume = check_job_paths(job_reading(t.at("data/a.csv")), t.at("outside/step-10"), *roots, "node 0");
  CHECK(resume.message().find("--resume") != std::string::npos);
  // The master decodes generated GPT-2 tokens with the vocabulary a job
  // names: under a data root, or refused at submit.
  graph::Job bpe = job_reading(t.at("data/a.csv"));
  bpe.generate = graph::Generate{.input = "idx", .logits = "logits", .tokenizer = "gpt2", .vocab = t.at("outside")};
  Status vocab = check_job_paths(bpe, "", *roots, "node 0");
  CHECK(vocab.code() == Code::kPermissionDenied);
  CHECK(vocab.message().find("generate.vocab '" + t.at("outside") + "'") != std::string::npos);
  CHECK(check_job_paths(bpe, "", *roots, "node 1", false).ok());  // other nodes sample nothing
  bpe.generate->vocab = t.at("data");
  CHECK(check_job_paths(bpe, "", *roots, "node 0").ok());
  // A root that does not exist is an error when given.
  CHECK(!AllowedRoots::make({t.at("missing")}, {}).ok());
}

TEST_CASE("the default roots: the working folder, /usr/share and /tmp for data; the working folder and /tmp for checkpoints") {
  auto roots = AllowedRoots::make({}, {});
  REQUIRE(roots.ok());
  CHECK(check_job_paths(job_reading("/usr/share/datasets/x.csv", "/tmp/ckpt"), "", *roots, "n").ok());
  CHECK(check_job_paths(job_reading("relative/x.csv", "ckpt"), "", *roots, "n").ok());
  CHECK(check_job_paths(job_reading("/etc/passwd"), "", *roots, "n").code() == Code::kPermissionDenied);
  CHECK(check_job_paths(job_reading("/tmp/x.csv", "/usr/share/ckpt"), "", *roots, "n").code() ==
        Code::kPermissionDenied);
}
