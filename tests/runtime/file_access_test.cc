// What a job may make this process read, checked on the opened descriptor
// (base/file_access.h): a key file the process holds is never read, by any
// name; a file outside the roots is refused even when a link was swapped in
// after the path was checked; checkpoints are checked at every read and
// write. Its own executable: it registers key files, which the process
// remembers, and no other suite's default roots should see them.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <doctest/doctest.h>

#include "base/file_access.h"
#include "comm/cluster_key.h"
#include "kernels/data/dataset.h"
#include "kernels/data/file_bytes.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/cluster/allowed_roots.h"

using namespace rill;
namespace fs = std::filesystem;

namespace {

struct Tree {
  fs::path base = fs::temp_directory_path() / fmt::format("rill-file-access-{}", ::getpid());
  Tree() {
    fs::remove_all(base);
    fs::create_directories(base / "data");
    fs::create_directories(base / "keys");
    fs::create_directories(base / "outside");
    fs::create_directories(base / "ckpt");
    std::ofstream(base / "data" / "x.csv") << "1,2,0\n3,4,1\n";
    std::ofstream(base / "outside" / "secret.csv") << "5,6,1\n";
  }
  ~Tree() { fs::remove_all(base); }
  std::string at(const std::string& p) const { return (base / p).string(); }
};

DatasetSpec csv_at(const std::string& path) {
  DatasetSpec spec;
  spec.name = "train";
  spec.kind = "csv";
  spec.path = path;
  spec.label_column = 2;
  return spec;
}

// The secret's line of a key file (its second line).
std::string secret_line(const std::string& key_file) {
  std::ifstream in(key_file);
  std::string line;
  std::getline(in, line);
  std::getline(in, line);
  return line;
}

}  // namespace

TEST_CASE("a key file this process holds is never read as data, by any name, and never quoted") {
  Tree t;
  auto key = comm::generate_cluster_key();
  REQUIRE(key.ok());
  const std::string key_file = t.at("keys/cluster.key");
  REQUIRE(comm::write_key_file(key_file, *key).ok());
  // Before it is held, it is a file like another (this process's user may read it).
  CHECK(read_file_bytes(key_file).ok());
  REQUIRE(comm::read_key_file(key_file).ok());
  const std::string secret = secret_line(key_file);
  REQUIRE(secret.size() == 40);
  fs::create_symlink(key_file, t.at("data/link.csv"));
  fs::create_hard_link(key_file, t.at("data/hard.csv"));
  for (const std::string& name : {key_file, t.at("data/link.csv"), t.at("data/hard.csv")}) {
    CAPTURE(name);
    auto read = read_file_bytes(name);
    REQUIRE_FALSE(read.ok());
    CHECK(read.status().code() == Code::kPermissionDenied);
    CHECK(read.status().message().find("is a key file this process holds") != std::string::npos);
    // Through a reader, anywhere or within roots that hold the hard link.
    const FileAccess roots{true, {t.at("data")}, "--data-root"};
    for (const FileAccess& access : {FileAccess{}, roots}) {
      auto opened = Dataset::open(csv_at(name), access);
      REQUIRE_FALSE(opened.ok());
      CHECK(opened.status().message().find("key file") != std::string::npos);
      CHECK(opened.status().message().find(secret.substr(0, 8)) == std::string::npos);
    }
  }
  // The same file as /proc/self/fd/N: the same inode.
  const int fd = ::open(key_file.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK_FALSE(read_file_bytes(fmt::format("/proc/self/fd/{}", fd)).ok());
  ::close(fd);
  // A copy is another file: read, but a reader's error quotes a few bytes of
  // a cell, never the line (the 40-character secret is one cell).
  std::ofstream(t.at("data/copy.csv")) << secret << "\n";
  DatasetSpec copy = csv_at(t.at("data/copy.csv"));
  copy.label_column = -1;
  auto opened = Dataset::open(copy);
  REQUIRE_FALSE(opened.ok());
  INFO(opened.status().message());
  // excerpt() keeps 6 bytes and then writes "...": what follows the quote
  // must be none of the secret (a prefix test would fail on a secret whose
  // 7th character is '.', one key in 85).
  CHECK(opened.status().message().find("'" + secret.substr(0, 6) + "...' (40 bytes)") != std::string::npos);
  CHECK(opened.status().message().find(secret.substr(6)) == std::string::npos);
}

TEST_CASE("a root that holds a key file the process holds: refused when given; the working folder left out") {
  Tree t;
  auto key = comm::generate_cluster_key();
  REQUIRE(key.ok());
  REQUIRE(comm::write_key_file(t.at("keys/cluster.key"), *key).ok());
  REQUIRE(comm::read_key_file(t.at("keys/cluster.key")).ok());
  auto given = AllowedRoots::make({t.at("keys")}, {});
  REQUIRE_FALSE(given.ok());
  CHECK(given.status().message().find("holds the key file " + t.at("keys/cluster.key")) != std::string::npos);
  CHECK_FALSE(AllowedRoots::make({t.base.string()}, {}).ok());  // a folder above it too
  CHECK(AllowedRoots::make({t.at("data")}, {t.at("keys")}).ok() == false);
  CHECK(AllowedRoots::make({t.at("data")}, {t.at("ckpt")}).ok());
  // Started in the key's folder: the working folder is no default root.
  const fs::path here = fs::current_path();
  fs::current_path(t.at("keys"));
  auto defaults = AllowedRoots::make({}, {});
  fs::current_path(here);
  REQUIRE(defaults.ok());
  for (const std::string& root : defaults->data) CHECK(root != t.at("keys"));
  for (const std::string& root : defaults->checkpoint) CHECK(root != t.at("keys"));
  CHECK(defaults->data.size() == 2);  // /usr/share and /tmp: the key itself is refused there by identity
}

TEST_CASE("a file is checked as opened: a link swapped in after the path was checked is refused") {
  Tree t;
  auto roots = AllowedRoots::make({t.at("data")}, {t.at("ckpt")});
  REQUIRE(roots.ok());
  const FileAccess access = roots->data_access();
  const std::string path = t.at("data/x.csv");
  graph::Job job;
  job.datasets.push_back(csv_at(path));
  REQUIRE(check_job_paths(job, "", *roots, "node 0").ok());  // at submit: a file in the root
  CHECK(Dataset::open(csv_at(path), access).ok());
  // Then, before the node opens it, the file becomes a link out of the root.
  fs::remove(path);
  fs::create_symlink(t.at("outside/secret.csv"), path);
  auto opened = Dataset::open(csv_at(path), access);
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.status().code() == Code::kPermissionDenied);
  CHECK(opened.status().message().find("(opened as " + t.at("outside/secret.csv") + ") is outside") !=
        std::string::npos);
  // No roots at all (every default missing) reads nothing, rather than anything.
  CHECK_FALSE(Dataset::open(csv_at(t.at("outside/secret.csv")), FileAccess{true, {}, "--data-root"}).ok());
  CHECK(Dataset::open(csv_at(t.at("outside/secret.csv"))).ok());  // a user's own run: anywhere
}

TEST_CASE("checkpoints: files only their owner reads, the folder checked at every write, reads checked as opened") {
  Tree t;
  auto roots = AllowedRoots::make({t.at("data")}, {t.at("ckpt")});
  REQUIRE(roots.ok());
  const FileAccess access = roots->checkpoint_access();
  Checkpoint c;
  c.step = 3;
  c.job = "job";
  c.tensors = {{"w", {2}, {1.0f, 2.0f}}};
  const std::string dir = t.at("ckpt/run");
  Status made = check_checkpoint_dir(dir, access);
  REQUIRE_MESSAGE(made.ok(), made.message());
  REQUIRE(write_checkpoint(dir, c, 2, access).ok());
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    struct stat st {};
    REQUIRE(::stat(entry.path().c_str(), &st) == 0);
    CAPTURE(entry.path());
    CHECK((st.st_mode & 077) == 0);
  }
  CHECK(read_checkpoint(dir, access).ok());
  // The folder swapped for a link out of the roots after the run began.
  fs::rename(dir, t.at("outside/run"));
  fs::create_symlink(t.at("outside/run"), dir);
  c.step = 4;
  Status written = write_checkpoint(dir, c, 2, access);
  CHECK(written.code() == Code::kPermissionDenied);
  CHECK(written.message().find("is outside") != std::string::npos);
  auto read = read_checkpoint(dir, access);
  REQUIRE_FALSE(read.ok());
  CHECK(read.status().code() == Code::kPermissionDenied);
  CHECK(read_checkpoint(dir).ok());  // a user's own run reads its own link
}
