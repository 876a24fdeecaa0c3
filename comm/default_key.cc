#include "comm/default_key.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <sodium.h>

namespace rill::comm {
namespace {

// Closes a descriptor on every path.
struct Descriptor {
  int fd = -1;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// The folder of the default key must be this user's alone: another user who
// may write there could put a key of their own in its place. Opened once
// (never through a link) and checked as opened, so the key is then read
// from the folder that was checked (into `folder`).
Status open_key_folder(const std::string& dir, Descriptor& folder) {
  folder.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (folder.fd < 0) {
    const int error = errno;
    if (error == ENOTDIR || error == ELOOP)
      return Status(Code::kPermissionDenied,
                    fmt::format("the key folder {} is not a folder (a link is not followed)", dir));
    return Status(Code::kUnavailable, fmt::format("the key folder {}: {}", dir, std::strerror(error)));
  }
  struct stat st {};
  if (::fstat(folder.fd, &st) != 0)
    return Status(Code::kUnavailable, fmt::format("the key folder {}: {}", dir, std::strerror(errno)));
  if (st.st_uid != ::geteuid())
    return Status(Code::kPermissionDenied,
                  fmt::format("the key folder {} belongs to another user (uid {}): refusing to keep a key there", dir,
                              st.st_uid));
  if ((st.st_mode & 022) != 0)
    return Status(Code::kPermissionDenied,
                  fmt::format("the key folder {} may be written by other users (mode {:04o}): another could put a "
                              "key of their own there; run chmod go-w {}",
                              dir, st.st_mode & 07777, dir));
  return {};
}

}  // namespace

bool insecure_from_environment() {
  const char* value = std::getenv(kInsecureEnv);
  return value != nullptr && *value != '\0' && std::string_view(value) != "0";
}

StatusOr<std::string> default_key_path() {
  const char* config = std::getenv("XDG_CONFIG_HOME");
  if (config != nullptr && *config == '/') return std::string(config) + "/rill/cluster.key";
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0')
    return invalid_argument("no default cluster key: neither $XDG_CONFIG_HOME nor $HOME is set (give --key FILE)");
  return std::string(home) + "/.config/rill/cluster.key";
}

StatusOr<std::shared_ptr<const ClusterKey>> read_default_key() {
  RILL_ASSIGN_OR_RETURN(std::string path, default_key_path());
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::shared_ptr<const ClusterKey>();
    return Status(Code::kUnavailable, fmt::format("the default key file {}: {}", path, std::strerror(errno)));
  }
  Descriptor folder;
  RILL_RETURN_IF_ERROR(open_key_folder(std::filesystem::path(path).parent_path().string(), folder));
  auto key = read_key_file(path, KeyFileAt{folder.fd, std::filesystem::path(path).filename().string(), false});
  if (!key.ok()) return key.status().with_context("the default key");
  return std::make_shared<const ClusterKey>(*key);
}

StatusOr<std::string> prepare_default_key_folder() {
  RILL_ASSIGN_OR_RETURN(std::string path, default_key_path());
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Status(Code::kUnavailable, fmt::format("cannot make the key folder {}: {}", dir.string(), std::strerror(errno)));
  Descriptor folder;
  RILL_RETURN_IF_ERROR(open_key_folder(dir.string(), folder));
  return path;
}

StatusOr<std::shared_ptr<const ClusterKey>> default_key_made_on_first_use(bool* made) {
  *made = false;
  RILL_ASSIGN_OR_RETURN(std::shared_ptr<const ClusterKey> existing, read_default_key());
  if (existing) return existing;
  RILL_ASSIGN_OR_RETURN(const std::string path, prepare_default_key_folder());
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  // Written whole under a name of its own, then linked into place: an
  // agent that starts beside this one either makes the file first (the
  // link fails, and its key is read) or reads this one, never half of one.
  RILL_ASSIGN_OR_RETURN(ClusterKey key, generate_cluster_key());
  const std::string temporary =
      fmt::format("{}/.cluster.key.{}.{:08x}", dir.string(), ::getpid(), randombytes_random());
  RILL_RETURN_IF_ERROR(write_key_file(temporary, key));
  const int linked = ::link(temporary.c_str(), path.c_str());
  const int saved = errno;
  ::unlink(temporary.c_str());
  if (linked != 0 && saved != EEXIST)
    return Status(Code::kUnavailable, fmt::format("cannot write the default key file {}: {}", path, std::strerror(saved)));
  *made = linked == 0;
  RILL_ASSIGN_OR_RETURN(std::shared_ptr<const ClusterKey> stored, read_default_key());
  if (!stored) return Status(Code::kUnavailable, fmt::format("the default key file {} went as it was made", path));
  return stored;
}

StatusOr<std::shared_ptr<const ClusterKey>> key_from_environment() {
  const char* path = std::getenv(kKeyFileEnv);
  if (path != nullptr && *path != '\0') {
    auto key = read_key_file(path);
    if (!key.ok()) return key.status().with_context(kKeyFileEnv);
    return std::make_shared<const ClusterKey>(*key);
  }
  if (insecure_from_environment()) return std::shared_ptr<const ClusterKey>();
  return read_default_key();
}

StatusOr<std::shared_ptr<const ClusterKey>> agent_key(bool loopback) {
  RILL_ASSIGN_OR_RETURN(std::shared_ptr<const ClusterKey> key, key_from_environment());
  if (key || insecure_from_environment() || !loopback) return key;
  bool made = false;
  RILL_ASSIGN_OR_RETURN(key, default_key_made_on_first_use(&made));
  if (made) {
    auto path = default_key_path();
    fmt::print(stderr,
               "rill: made a cluster key for this user's agents and clients on this machine: {} (0600; --key FILE "
               "names another, --insecure runs without one)\n",
               path.ok() ? *path : std::string("?"));
  }
  return key;
}

}  // namespace rill::comm
