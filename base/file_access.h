// What a file a job names may be, checked on the descriptor it was opened
// as, so that what is checked is what is read: a path checked first and
// opened later can be swapped for a link in between (to /etc/shadow, to the
// cluster key), and one opened and then checked cannot.
//
// Two rules:
//  - A file this process holds as a key (its cluster or client key file,
//    registered by whoever read it: hold_key_file) is never read as data,
//    whatever path names it: a link, a hard link, /proc/self/fd/N. It is
//    known by its device and inode, so every name of it is refused.
//  - With roots (an agent's --data-root / --checkpoint-root), the opened
//    file's own path, as the kernel resolved it (/proc/self/fd/N), lies in
//    one of them: a link inside a root that points outside is outside.
// Header-only, Linux (/proc/self/fd).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/status.h"

namespace rill {

namespace file_access_internal {
struct KeyFiles {
  std::mutex mu;
  std::set<std::pair<dev_t, ino_t>> held;
  std::vector<std::string> paths;  // resolved, of those that have one
};
inline KeyFiles& key_files() {
  static KeyFiles files;
  return files;
}
}  // namespace file_access_internal

// The path the kernel resolved for an open descriptor (links followed), or
// "" when it cannot tell (no /proc, a deleted file, a file no path names).
inline std::string opened_path(int fd) {
  char buffer[PATH_MAX];
  const std::string link = fmt::format("/proc/self/fd/{}", fd);
  const ssize_t n = ::readlink(link.c_str(), buffer, sizeof(buffer) - 1);
  if (n <= 0 || buffer[0] != '/') return {};
  std::string path(buffer, static_cast<size_t>(n));
  if (path.ends_with(" (deleted)") || path.starts_with("/memfd:")) return {};
  return path;
}

// Registers the key file open as `fd` (`st` its fstat) as one this process
// holds. A copy of the descriptor stays open for the process's life, so the
// inode is never freed and given to another file while it is remembered
// (a key file removed and another made in its place is not taken for it).
// Thread-safe.
inline void hold_key_file(int fd, const struct stat& st) {
  const std::string path = opened_path(fd);
  auto& files = file_access_internal::key_files();
  std::lock_guard lock(files.mu);
  if (!files.held.emplace(st.st_dev, st.st_ino).second) return;
  (void)::fcntl(fd, F_DUPFD_CLOEXEC, 3);  // kept: the inode stays this file's
  if (!path.empty()) files.paths.push_back(path);
}

// Registers a key file this process does not use but must never read as
// data (the user's default key, where an agent runs with another): by
// identity only (`fd` stays open; roots that hold it are not refused).
// Thread-safe.
inline void guard_key_file(int fd, const struct stat& st) {
  auto& files = file_access_internal::key_files();
  std::lock_guard lock(files.mu);
  if (files.held.emplace(st.st_dev, st.st_ino).second) return;  // `fd` kept: the inode stays this file's
  ::close(fd);
}

// The resolved paths of the key files this process holds. Thread-safe.
inline std::vector<std::string> held_key_paths() {
  auto& files = file_access_internal::key_files();
  std::lock_guard lock(files.mu);
  return files.paths;
}

// Whether `st` describes a file this process holds as a key. Thread-safe.
inline bool is_held_key_file(const struct stat& st) {
  auto& files = file_access_internal::key_files();
  std::lock_guard lock(files.mu);
  return files.held.count({st.st_dev, st.st_ino}) != 0;
}

// True when `path` is `root` or lies inside it, both absolute and resolved
// (no "..", no links): compared component by component, so /data2 is not in
// /data.
inline bool resolved_path_within(std::string_view path, std::string_view root) {
  while (root.size() > 1 && root.back() == '/') root.remove_suffix(1);
  if (root == "/") return !path.empty() && path.front() == '/';
  return path.substr(0, root.size()) == root && (path.size() == root.size() || path[root.size()] == '/');
}

// Where a job's reads may go: anywhere this process may read (the default:
// a user's own run), or, `restricted`, only under `roots` (absolute,
// resolved; none at all when empty), named in errors by `flag`
// (--data-root).
struct FileAccess {
  bool restricted = false;
  std::vector<std::string> roots;
  std::string flag;
  bool anywhere() const { return !restricted; }
};

// Checks descriptor `fd` (its fstat in `st`), opened for `path` (as the job
// named it; `what` says which file it is: "dataset 'train' path") against
// both rules. The error (kPermissionDenied) names the file, never its content.
inline Status check_opened_file(int fd, const struct stat& st, const std::string& path, const FileAccess& access,
                                const std::string& what) {
  if (is_held_key_file(st))
    return Status(Code::kPermissionDenied,
                  fmt::format("{} '{}' is a key file this process holds: it is never read as data", what, path));
  if (access.anywhere()) return {};
  const std::string real = opened_path(fd);
  if (real.empty())
    return Status(Code::kPermissionDenied,
                  fmt::format("{} '{}': cannot tell where it lies (is /proc mounted?), so it is not read", what, path));
  for (const std::string& root : access.roots)
    if (resolved_path_within(real, root)) return {};
  return Status(Code::kPermissionDenied,
                fmt::format("{} '{}'{} is outside the folders this agent lets jobs use ({}; set with {})", what, path,
                            real == path ? "" : fmt::format(" (opened as {})", real),
                            access.roots.empty() ? "none" : fmt::format("{}", fmt::join(access.roots, ", ")),
                            access.flag));
}

// " (relative to the working folder DIR)" for a relative path, else "": a
// job's relative paths are read from the folder its run (or agent) started
// in, which an error about one says.
inline std::string relative_note(const std::string& path) {
  if (path.empty() || path[0] == '/') return "";
  char cwd[4096];
  if (::getcwd(cwd, sizeof cwd) == nullptr) return " (a relative path)";
  return fmt::format(" (relative to the working folder {})", cwd);
}

// Opens `path` for reading the way a job's file must be: first as a bare
// reference (O_PATH: nothing of the file is opened, no FIFO's writer woken,
// no device touched), checked by check_opened_file, then, if it is a
// regular file (or a FIFO, where `fifos`), opened for reading through that
// same reference, without blocking. On success `*st` describes the file;
// the caller closes the descriptor. A directory, device or socket is
// kInvalidArgument naming its kind; a missing file kNotFound.
inline StatusOr<int> open_checked(const std::string& path, const FileAccess& access, const std::string& what,
                                  bool fifos, struct stat* st) {
  const int reference = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (reference < 0) {
    const int error = errno;
    return Status(error == ENOENT ? Code::kNotFound : Code::kUnavailable,
                  fmt::format("'{}'{}: cannot open: {}", path, relative_note(path), std::strerror(error)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{reference};
  if (::fstat(reference, st) != 0)
    return Status(Code::kUnavailable, fmt::format("'{}': cannot stat: {}", path, std::strerror(errno)));
  RILL_RETURN_IF_ERROR(check_opened_file(reference, *st, path, access, what));
  if (!S_ISREG(st->st_mode) && !(fifos && S_ISFIFO(st->st_mode)))
    return Status(Code::kInvalidArgument,
                  fmt::format("'{}': not a regular file (a {}); Rill reads {}", path,
                              S_ISDIR(st->st_mode)    ? "directory"
                              : S_ISFIFO(st->st_mode) ? "FIFO"
                                                      : "device or socket",
                              fifos ? "files and pipes only" : "this from a regular file only"));
  const int fd = ::open(fmt::format("/proc/self/fd/{}", reference).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status(Code::kUnavailable, fmt::format("'{}': cannot open: {}", path, std::strerror(errno)));
  return fd;
}

}  // namespace rill
