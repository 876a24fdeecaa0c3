// Files created where other users may write (base/safe_files.h): no link
// followed and nothing of another user's written there; elsewhere paths are
// taken as given.
#include <doctest/doctest.h>

#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

// Runs `plant` as another user (uid 4242) who is a member of group 4243 (no
// account needed: root may take any ids); its exit code, or -1.
namespace rill {
namespace {
template <typename Fn>
int as_group_member(Fn plant) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const gid_t group = 4243;
    if (::setgroups(1, &group) != 0 || ::setgid(group) != 0 || ::setuid(4242) != 0) std::_Exit(2);
    std::_Exit(plant() ? 0 : 1);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}
}  // namespace

TEST_CASE("a folder its group may write counts as shared: a link a group member planted there is not followed") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: making another user and a group needs root");
    return;
  }
  Folders f;
  const fs::path group = f.root / "group";  // a team's folder: setgid, group-writable, as 2775
  fs::create_directories(group);
  REQUIRE(::chown(group.c_str(), 0, 4243) == 0);
  REQUIRE(::chmod(group.c_str(), 02775) == 0);
  CHECK(others_may_write(group.string()));
  const fs::path planted = group / "result.json";
  REQUIRE(as_group_member([&] { return ::symlink(f.target.c_str(), planted.c_str()) == 0; }) == 0);
  Status written = write_file(planted.string(), "overwritten", "the result file");
  CHECK(written.code() == Code::kPermissionDenied);
  CHECK(written.message().find("is a symbolic link in " + group.string()) != std::string::npos);
  CHECK(read_all(f.target) == "keep");
  // A checkpoint folder the group may write is refused too (a member could
  // replace what is written there).
  const fs::path team_ckpt = f.own / "team-ckpt";
  fs::create_directories(team_ckpt);
  REQUIRE(::chown(team_ckpt.c_str(), 0, 4243) == 0);
  REQUIRE(::chmod(team_ckpt.c_str(), 0775) == 0);
  CHECK(check_own_folder(team_ckpt.string(), "checkpoint.dir").message().find("may be written by its group") !=
        std::string::npos);
  // A group of the owner's alone (a user private group, as umask 002 makes
  // folders) is no one else's: such a folder is the user's own.
  const fs::path private_group = f.own / "umask-002";
  fs::create_directories(private_group);
  REQUIRE(::chmod(private_group.c_str(), 0775) == 0);  // root's own group, root its only member
  CHECK(check_own_folder(private_group.string(), "checkpoint.dir").ok());
}

TEST_CASE("a checkpoint folder below a folder another user made in /tmp is refused: they could swap it at any time") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: making another user needs root");
    return;
  }
  Folders f;
  const fs::path theirs = f.shared / "evil";  // made by another user in a sticky folder every user may write
  REQUIRE(as_group_member([&] { return ::mkdir(theirs.c_str(), 0777) == 0 && ::chmod(theirs.c_str(), 0777) == 0; }) ==
          0);
  // The checkpoint folder would be this user's own once made, but the
  // folder above it is theirs: they could rename it and put a link there
  // between two writes.
  Status refused = check_own_folder((theirs / "ckpt").string(), "checkpoint.dir");
  CHECK(refused.code() == Code::kPermissionDenied);
  CHECK(refused.message().find("belongs to another user (uid 4242)") != std::string::npos);
  // One's own folder there, made private whatever the umask, is fine.
  const mode_t old = ::umask(002);
  CHECK(make_private_folders((f.shared / "mine" / "ckpt").string(), "checkpoint.dir").ok());
  ::umask(old);
  CHECK(check_own_folder((f.shared / "mine" / "ckpt").string(), "checkpoint.dir").ok());
}

}  // namespace rill
