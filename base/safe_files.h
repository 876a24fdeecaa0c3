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
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

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

// Whether group `gid` holds no one but `owner`: a user private group
// (Debian's and RHEL's default, where umask 002 makes a user's folders
// group-writable): its listed members are the owner alone, or it lists
// none and is the owner's primary group. (The rule of Debian's OpenSSH for
// StrictModes.)
inline bool group_is_owner_only(gid_t gid, uid_t owner) {
  std::vector<char> buffer(16384);
  struct passwd pw{}, *found_pw = nullptr;
  struct group gr{}, *found_gr = nullptr;
  if (::getpwuid_r(owner, &pw, buffer.data(), buffer.size() / 2, &found_pw) != 0 || found_pw == nullptr) return false;
  if (::getgrgid_r(gid, &gr, buffer.data() + buffer.size() / 2, buffer.size() / 2, &found_gr) != 0 ||
      found_gr == nullptr)
    return false;
  for (char** member = gr.gr_mem; *member != nullptr; ++member)
    if (std::strcmp(*member, pw.pw_name) != 0) return false;
  return gr.gr_mem[0] != nullptr || gid == pw.pw_gid;
}

// Whether someone other than the owner may write what `st` describes: every
// user, or a group with another member in it.
inline bool writable_by_others(const struct stat& st) {
  return (st.st_mode & S_IWOTH) != 0 || ((st.st_mode & S_IWGRP) != 0 && !group_is_owner_only(st.st_gid, st.st_uid));
}

// Whether users other than this one (and root) may create or replace
// entries in folder `dir`: every user or its group may write it (a member
// of the group plants a link as well as anyone), or another user owns it.
inline bool others_may_write(const std::string& dir) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) return false;
  return writable_by_others(st) || (st.st_uid != ::geteuid() && st.st_uid != 0);
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

// A folder Rill writes files in (a checkpoint folder), checked along its
// whole path: no folder from / down to it may let another user replace the
// next part of the path (a folder others may write is sticky, as /tmp, and
// what lies in it on the way is this user's or root's and not a link), and
// the folder itself is written by no one else. Then nobody else can swap
// any part of the path for a link, now or later, so what Rill writes there
// by path stays there. Parts that do not exist yet are whoever makes them's
// (make_private_folders). A link in one's own folder is followed (the
// user's own doing), and the path it leads to checked in turn.
inline Status check_own_folder(const std::string& given, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path path = fs::absolute(without_trailing_slash(given), ec).lexically_normal();
  if (ec) return Status(Code::kInvalidArgument, fmt::format("{} '{}': {}", what, given, ec.message()));
  for (int links = 0; links < 40; ++links) {
    fs::path so_far = "/";
    bool followed = false;
    for (auto part = path.begin(); part != path.end(); ++part) {
      if (part->empty() || *part == "/") continue;
      const fs::path next = so_far / *part;
      struct stat st{}, parent{};
      if (::lstat(next.c_str(), &st) != 0) return {};  // not there: whoever makes it owns it
      if (::stat(so_far.c_str(), &parent) != 0) return {};
      const bool shared = writable_by_others(parent) || (parent.st_uid != ::geteuid() && parent.st_uid != 0);
      if (shared && S_ISLNK(st.st_mode))
        return Status(Code::kPermissionDenied,
                      fmt::format("{} '{}': {} is a symbolic link in {}, a folder other users can write: refusing "
                                  "to follow it",
                                  what, given, next.string(), so_far.string()));
      if (shared && (parent.st_mode & S_ISVTX) == 0)
        return Status(Code::kPermissionDenied,
                      fmt::format("{} '{}': {} lies in {}, which other users may write (mode {:o}, owner uid {}): "
                                  "they could replace it; choose a folder of your own",
                                  what, given, next.string(), so_far.string(), parent.st_mode & 07777,
                                  parent.st_uid));
      if (shared && st.st_uid != ::geteuid() && st.st_uid != 0)
        return Status(Code::kPermissionDenied, foreign_owner(st, next.string(), what));
      if (S_ISLNK(st.st_mode)) {  // in a folder of one's own: where it leads is checked in turn
        fs::path rest;
        for (auto after = std::next(part); after != path.end(); ++after) rest /= *after;
        path = (fs::canonical(next, ec) / rest).lexically_normal();
        if (ec) return {};  // a dangling link: creating through it fails, naming it
        followed = true;
        break;
      }
      so_far = next;
    }
    if (followed) continue;
    struct stat st{};
    if (::stat(path.c_str(), &st) == 0 && writable_by_others(st))
      return Status(Code::kPermissionDenied,
                    fmt::format("{} '{}' may be written by {} (mode {:o}): another could replace what Rill writes "
                                "there; make it yours alone (chmod go-w)",
                                what, given, (st.st_mode & S_IWOTH) != 0 ? "every user" : "its group",
                                st.st_mode & 07777));
    return {};
  }
  return Status(Code::kInvalidArgument, fmt::format("{} '{}': too many symbolic links", what, given));
}

// Makes the missing folders of `dir` (after check_own_folder), each
// writable by this user alone whatever the umask (002 would make them
// group-writable), so they pass the check.
inline Status make_private_folders(const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path path = fs::absolute(without_trailing_slash(dir), ec).lexically_normal();
  fs::path so_far = "/";
  for (const fs::path& part : path) {
    if (part.empty() || part == "/") continue;
    so_far /= part;
    if (::mkdir(so_far.c_str(), 0755) == 0) {
      if (::chmod(so_far.c_str(), 0755) != 0)
        return Status(Code::kUnavailable,
                      fmt::format("{}: cannot set the mode of {}: {}", what, so_far.string(), std::strerror(errno)));
    } else if (errno != EEXIST) {
      return Status(Code::kUnavailable,
                    fmt::format("{}: cannot create {}: {}", what, so_far.string(), std::strerror(errno)));
    }
  }
  return {};
}

}  // namespace rill
