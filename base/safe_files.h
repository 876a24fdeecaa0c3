// Creating files where other local users may write (/tmp, a group's
// shared folder, and folders like them): logs, metrics, traces, results, checkpoint folders. Another user
// who plants a symbolic link there could make Rill overwrite any file it may
// write; one who plants the file or folder itself could read what Rill
// writes, or hand it their own. So in such a folder Rill never follows a
// link at the last component and refuses what another user owns; elsewhere
// (the user's own folders, /dev/stdout) paths are taken as given.
// Header-only, POSIX.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "base/status.h"

namespace rill {

// `path` without trailing slashes ("/ckpt/" is "/ckpt": its folder is /).
inline std::string without_trailing_slash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// The folder that holds `path` ("." for a bare name).
inline std::string parent_folder(const std::string& path) {
  const std::string parent = std::filesystem::path(without_trailing_slash(path)).parent_path().string();
  return parent.empty() ? "." : parent;
}

// Whether users other than this one (and root) may create or replace
// entries in folder `dir`: every user or its group may write it (a member
// of the group plants a link as well as anyone), or another user owns it.
inline bool others_may_write(const std::string& dir) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) return false;
  return (st.st_mode & (S_IWOTH | S_IWGRP)) != 0 || (st.st_uid != ::geteuid() && st.st_uid != 0);
}

// Why `owner` (a file or folder at `path`) must not be written to by this
// user in a shared folder ("" if it may).
inline std::string foreign_owner(const struct stat& st, const std::string& path, const std::string& what) {
  if (st.st_uid == ::geteuid()) return {};
  return fmt::format("{} '{}' belongs to another user (uid {}) in {}, a folder other users can write: refusing to "
                     "write there (remove it, or choose a folder of your own)",
                     what, path, st.st_uid, parent_folder(path));
}

// Opens `path` for writing (created 0644 if missing; `append`, else
// truncated) and returns its descriptor. In a folder others may write, a
// symbolic link, a file of another user, anything but a plain file (a
// planted FIFO would block the open) and a file with other names (a hard
// link to one of the user's files) are refused, naming `what` and the
// path. The caller closes the descriptor.
inline StatusOr<int> open_for_write(const std::string& path, bool append, const std::string& what) {
  const bool shared = others_may_write(parent_folder(path));
  const int flags =
      O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : 0) | (shared ? O_NOFOLLOW | O_NONBLOCK : 0);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    const int error = errno;
    if (shared && error == ELOOP)
      return Status(Code::kPermissionDenied,
                    fmt::format("{} '{}' is a symbolic link in {}, a folder other users can write: refusing to "
                                "follow it",
                                what, path, parent_folder(path)));
    return Status(Code::kInvalidArgument, fmt::format("cannot write {} '{}': {}", what, path, std::strerror(error)));
  }
  if (shared) {
    struct stat st{};
    std::string refused = ::fstat(fd, &st) != 0 ? fmt::format("cannot inspect {} '{}'", what, path)
                                                : foreign_owner(st, path, what);
    if (refused.empty() && (!S_ISREG(st.st_mode) || st.st_nlink > 1))
      refused = fmt::format("{} '{}' in {}, a folder other users can write, is {}: refusing to write there", what,
                            path, parent_folder(path),
                            S_ISREG(st.st_mode) ? "a file with other names (a hard link)" : "not a plain file");
    if (refused.empty()) (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (!refused.empty()) {
      ::close(fd);
      return Status(Code::kPermissionDenied, refused);
    }
  }
  if (!append && ::ftruncate(fd, 0) != 0 && errno != EINVAL) {  // EINVAL: not a regular file (a device)
    const int error = errno;
    ::close(fd);
    return Status(Code::kInvalidArgument, fmt::format("cannot write {} '{}': {}", what, path, std::strerror(error)));
  }
  return fd;
}

// Writes `text` to `path` (replacing it), as open_for_write opens it.
inline Status write_file(const std::string& path, const std::string& text, const std::string& what) {
  RILL_ASSIGN_OR_RETURN(const int fd, open_for_write(path, false, what));
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return Status(Code::kInvalidArgument, fmt::format("cannot write {} '{}': {}", what, path, std::strerror(error)));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0)
    return Status(Code::kInvalidArgument, fmt::format("cannot write {} '{}': {}", what, path, std::strerror(errno)));
  return {};
}

// A folder Rill writes files in (a checkpoint folder), after it was made:
// in a folder others may write, not a link and not another user's; and not
// one any user may write itself.
inline Status check_own_folder(const std::string& given, const std::string& what) {
  const std::string dir = without_trailing_slash(given);
  struct stat st{};
  if (others_may_write(parent_folder(dir))) {
    if (::lstat(dir.c_str(), &st) != 0) return {};  // not there: whoever makes it owns it
    if (S_ISLNK(st.st_mode))
      return Status(Code::kPermissionDenied,
                    fmt::format("{} '{}' is a symbolic link in {}, a folder other users can write: refusing to "
                                "follow it",
                                what, dir, parent_folder(dir)));
    if (std::string refused = foreign_owner(st, dir, what); !refused.empty())
      return Status(Code::kPermissionDenied, refused);
  }
  if (::stat(dir.c_str(), &st) == 0 && (st.st_mode & (S_IWOTH | S_IWGRP)) != 0)
    return Status(Code::kPermissionDenied,
                  fmt::format("{} '{}' may be written by {} (mode {:o}): another could replace what Rill writes "
                              "there; make it yours alone (chmod go-w)",
                              what, dir, (st.st_mode & S_IWOTH) != 0 ? "every user" : "its group",
                              st.st_mode & 07777));
  return {};
}

}  // namespace rill
