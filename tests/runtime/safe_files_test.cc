// Files created where other users may write (base/safe_files.h): no link
// followed and nothing of another user's written there; elsewhere paths are
// taken as given.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "base/safe_files.h"

namespace rill {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Folders {
  fs::path root = fs::temp_directory_path() / ("rill-safe-files-" + std::to_string(::getpid()));
  fs::path shared = root / "shared";    // mode 1777, as /tmp
  fs::path own = root / "own";          // mode 0700
  fs::path target = own / "precious";   // what a planted link points at
  Folders() {
    fs::remove_all(root);
    fs::create_directories(shared);
    fs::create_directories(own);
    REQUIRE(::chmod(shared.c_str(), 01777) == 0);
    REQUIRE(::chmod(own.c_str(), 0700) == 0);
    std::ofstream(target) << "keep";
  }
  ~Folders() { fs::remove_all(root); }
};

}  // namespace

TEST_CASE("a link planted in a folder others can write is not followed; in one's own folder it is") {
  Folders f;
  CHECK(others_may_write(f.shared.string()));
  CHECK_FALSE(others_may_write(f.own.string()));
  fs::create_symlink(f.target, f.shared / "metrics.jsonl");
  auto opened = open_for_write((f.shared / "metrics.jsonl").string(), true, "the metrics file");
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.status().code() == Code::kPermissionDenied);
  CHECK(opened.status().message().find("the metrics file '" + (f.shared / "metrics.jsonl").string() +
                                       "' is a symbolic link in " + f.shared.string()) != std::string::npos);
  CHECK_FALSE(write_file((f.shared / "metrics.jsonl").string(), "stolen", "the result").ok());
  CHECK(read_all(f.target) == "keep");
  // A file of one's own there is written as usual, appended to or replaced.
  REQUIRE(write_file((f.shared / "result.json").string(), "one", "the result").ok());
  REQUIRE(write_file((f.shared / "result.json").string(), "two", "the result").ok());
  CHECK(read_all(f.shared / "result.json") == "two");
  // In one's own folder a link is the user's own doing: followed.
  fs::create_symlink(f.target, f.own / "link");
  REQUIRE(write_file((f.own / "link").string(), "mine", "the result").ok());
  CHECK(read_all(f.target) == "mine");
}

TEST_CASE("a file or folder of another user in a folder others can write is refused") {
  Folders f;
  if (::geteuid() != 0) {
    MESSAGE("not root: cannot give a file to another user here; the link cases cover the rest");
    return;
  }
  const fs::path planted = f.shared / "agent.log";
  std::ofstream(planted) << "theirs";
  REQUIRE(::chmod(planted.c_str(), 0666) == 0);
  REQUIRE(::chown(planted.c_str(), 65534, 65534) == 0);
  auto opened = open_for_write(planted.string(), true, "the log file");
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.status().message().find("the log file '" + planted.string() +
                                       "' belongs to another user (uid 65534)") != std::string::npos);
  CHECK(read_all(planted) == "theirs");
  const fs::path their_folder = f.shared / "ckpt";
  fs::create_directories(their_folder);
  REQUIRE(::chown(their_folder.c_str(), 65534, 65534) == 0);
  Status folder = check_own_folder(their_folder.string(), "checkpoint.dir");
  CHECK(folder.message().find("checkpoint.dir '" + their_folder.string() + "' belongs to another user") !=
        std::string::npos);
}

TEST_CASE("a checkpoint folder that is a planted link, or that every user may write, is refused") {
  Folders f;
  fs::create_directory_symlink(f.own, f.shared / "ckpt");
  CHECK(check_own_folder((f.shared / "ckpt").string(), "checkpoint.dir").message().find("is a symbolic link") !=
        std::string::npos);
  CHECK(check_own_folder(f.shared.string(), "checkpoint.dir").message().find("may be written by every user") !=
        std::string::npos);
  CHECK(check_own_folder((f.shared / "new").string(), "checkpoint.dir").ok());  // not there yet: ours when made
  CHECK(check_own_folder(f.own.string(), "checkpoint.dir").ok());
}

}  // namespace rill
