#include "comm/cluster_key.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <span>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <sodium.h>
#include <spdlog/spdlog.h>
#include <zmq_addon.hpp>

#include "base/file_access.h"

namespace rill::comm {
namespace {

constexpr std::string_view kKeyFileHeader =
    "# A Rill cluster key: every agent and client of the cluster holds this file. Keep it secret.";
constexpr std::string_view kDerivationPrefix = "rill-curve-v1/";

// A keyed BLAKE2b of `message` under the cluster's secret, filling `out`:
// what every key and token derived from the secret is.
void keyed_hash(const ClusterKey& key, std::string_view message, std::span<uint8_t> out) {
  if (sodium_init() < 0) spdlog::critical("libsodium failed to initialise");
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                     key.secret.data(), key.secret.size());
}
constexpr const char* kZapDomain = "rill";

std::string z85(const uint8_t* data, size_t size) {
  std::string out(size * 5 / 4 + 1, '\0');
  zmq_z85_encode(out.data(), data, size);
  out.resize(size * 5 / 4);
  return out;
}

}  // namespace

StatusOr<ClusterKey> generate_cluster_key() {
  if (sodium_init() < 0) return Status(Code::kInternal, "libsodium failed to initialise");
  ClusterKey key;
  randombytes_buf(key.secret.data(), key.secret.size());
  return key;
}

Status write_private_file(const std::string& path, const std::string& text, bool overwrite) {
  // Created 0600 from the start: never readable by others; never through a
  // link (one planted there would take the secret, or have it overwrite a
  // file of the link's choosing).
  const int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | (overwrite ? O_TRUNC : O_EXCL);
  const int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0)
    return Status(Code::kUnavailable, fmt::format("cannot write the key file {}: {}", path,
                                                  errno == EEXIST ? "it exists (remove it first, or --force)"
                                                  : errno == ELOOP ? "it is a symbolic link (not followed)"
                                                                   : std::strerror(errno)));
  if (overwrite && ::fchmod(fd, 0600) != 0) {
    const int saved = errno;
    ::close(fd);
    return Status(Code::kUnavailable, fmt::format("cannot make the key file {} private: {}", path, std::strerror(saved)));
  }
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  if (::close(fd) != 0 || !written)
    return Status(Code::kUnavailable, fmt::format("cannot write the key file {}: {}", path, std::strerror(saved)));
  return {};
}

StatusOr<int> key_in_memory(const ClusterKey& key) {
  const int fd = ::memfd_create("rill-cluster-key", 0);  // no MFD_CLOEXEC: the agents inherit it
  if (fd < 0) return Status(Code::kUnavailable, fmt::format("cannot hold a key in memory (memfd): {}", std::strerror(errno)));
  const std::string text = fmt::format("{}\n{}\n", kKeyFileHeader, z85_key(key.secret));
  if (::fchmod(fd, 0600) != 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    const int saved = errno;
    ::close(fd);
    return Status(Code::kUnavailable, fmt::format("cannot hold a key in memory (memfd): {}", std::strerror(saved)));
  }
  return fd;
}

Status write_key_file(const std::string& path, const ClusterKey& key, bool overwrite) {
  return write_private_file(path, fmt::format("{}\n{}\n", kKeyFileHeader, z85_key(key.secret)),
                            overwrite);
}

StatusOr<std::vector<KeyLine>> read_key_lines(const std::string& path, const KeyFileAt& at) {
  // Opened once and checked as opened (never checked by path and opened
  // after, when a rename could put another file there); without blocking,
  // so a FIFO planted in its place cannot hold the process.
  const int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | (at.follow_links ? 0 : O_NOFOLLOW);
  const int fd = ::openat(at.dir, at.dir == AT_FDCWD ? path.c_str() : at.name.c_str(), flags);
  if (fd < 0) {
    const int error = errno;
    if (error == ELOOP && !at.follow_links)
      return invalid_argument("key file {} is a symbolic link: not followed here", path);
    return Status(error == ENOENT ? Code::kNotFound : Code::kUnavailable,
                  fmt::format("key file {}: {}", path, std::strerror(error)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return Status(Code::kUnavailable, fmt::format("key file {}: {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) return invalid_argument("key file {}: not a regular file", path);
  if (st.st_uid != ::geteuid())
    return invalid_argument("key file {} belongs to another user (uid {}, this process runs as uid {}): its owner "
                            "could change it; use a key file of your own",
                            path, st.st_uid, ::geteuid());
  if ((st.st_mode & 077) != 0)
    return invalid_argument("key file {} is open to other users (mode {:04o}): run chmod 600 {}", path,
                            st.st_mode & 07777, path);
  constexpr off_t kMaxKeyFileBytes = 64 << 10;  // a key file is a few lines
  if (st.st_size > kMaxKeyFileBytes)
    return invalid_argument("key file {}: {} bytes, more than a key file holds ({} at most)", path, st.st_size,
                            kMaxKeyFileBytes);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status(Code::kUnavailable, fmt::format("key file {}: cannot read it: {}", path, std::strerror(errno)));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  hold_key_file(fd, st);  // never read as data by this process (base/file_access.h)
  // A process that holds a key writes no core dump (the key would be in it)
  // and no other process of its user may trace it or read its memory.
  (void)::prctl(PR_SET_DUMPABLE, 0);
  std::vector<KeyLine> lines;
  int number = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t newline = text.find('\n', pos);
    if (newline == std::string::npos) newline = text.size();
    std::string line = text.substr(pos, newline - pos);
    pos = newline + 1;
    ++number;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (!line.empty() && line[0] != '#') lines.push_back({number, line});
  }
  sodium_memzero(text.data(), text.size());
  return lines;
}

std::string z85_key(const std::array<uint8_t, 32>& bytes) { return z85(bytes.data(), bytes.size()); }

bool z85_key(std::string_view text, std::array<uint8_t, 32>* out) {
  return text.size() == 40 && zmq_z85_decode(out->data(), std::string(text).c_str()) != nullptr;
}

StatusOr<ClusterKey> read_key_file(const std::string& path, const KeyFileAt& at) {
  RILL_ASSIGN_OR_RETURN(std::vector<KeyLine> lines, read_key_lines(path, at));
  if (lines.empty()) return invalid_argument("key file {}: holds no key (`rill keygen` writes one)", path);
  const KeyLine& first = lines.front();
  if (first.text.rfind("client ", 0) == 0)
    return invalid_argument("key file {} is a client key: it submits and watches jobs, and agents (rill agent, "
                            "rill launch) need the cluster key it was made from",
                            path);
  ClusterKey key;
  if (!z85_key(first.text, &key.secret))
    return invalid_argument("key file {}:{}: not a cluster key (40 Z85 characters; `rill keygen` writes one)", path,
                            first.number);
  return key;
}

std::string node_identity(int rank) { return fmt::format("node-{}", rank); }

std::string node_routing_id(int rank) {
  if (sodium_init() < 0) spdlog::critical("libsodium failed to initialise");
  std::array<uint8_t, 8> random{};
  randombytes_buf(random.data(), random.size());
  std::string id = node_identity(rank) + ".";
  for (uint8_t b : random) id += fmt::format("{:02x}", b);
  return id;
}

int routing_id_rank(std::string_view routing_id) {
  constexpr std::string_view kPrefix = "node-";
  if (routing_id.substr(0, kPrefix.size()) != kPrefix) return -1;
  const std::string_view rest = routing_id.substr(kPrefix.size());
  const size_t digits = std::min(rest.find_first_not_of("0123456789"), rest.size());
  if (digits == 0 || digits > 9 || (digits > 1 && rest[0] == '0')) return -1;
  if (digits < rest.size() && rest[digits] != '.') return -1;
  int rank = 0;
  for (size_t i = 0; i < digits; ++i) rank = rank * 10 + (rest[i] - '0');
  return rank;
}

std::string http_token(const ClusterKey& key) {
  std::array<uint8_t, 16> digest{};
  keyed_hash(key, "rill http token v1", digest);
  std::string hex;
  for (uint8_t b : digest) hex += fmt::format("{:02x}", b);
  return hex;
}

CurveKeyPair derive_key_pair(const ClusterKey& key, std::string_view identity) {
  std::array<uint8_t, crypto_box_SEEDBYTES> seed{};
  keyed_hash(key, std::string(kDerivationPrefix) + std::string(identity), seed);
  CurveKeyPair pair;
  crypto_box_seed_keypair(pair.public_key.data(), pair.secret_key.data(), seed.data());
  sodium_memzero(seed.data(), seed.size());
  return pair;
}

void curve_server(zmq::socket_t& socket, const ClusterKey& key, int rank) {
  const CurveKeyPair pair = derive_key_pair(key, node_identity(rank));
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(pair.secret_key.data(), pair.secret_key.size()));
  socket.set(zmq::sockopt::zap_domain, kZapDomain);
}

void curve_client(zmq::socket_t& socket, const ClusterKey& key, std::string_view identity, int server_rank) {
  const CurveKeyPair own = derive_key_pair(key, identity);
  const CurveKeyPair server = derive_key_pair(key, node_identity(server_rank));
  socket.set(zmq::sockopt::curve_serverkey, zmq::const_buffer(server.public_key.data(), server.public_key.size()));
  socket.set(zmq::sockopt::curve_publickey, zmq::const_buffer(own.public_key.data(), own.public_key.size()));
  socket.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(own.secret_key.data(), own.secret_key.size()));
}

std::string_view authenticated_identity(const zmq::message_t& message) {
  const char* user = zmq_msg_gets(const_cast<zmq_msg_t*>(message.handle()), "User-Id");
  return user == nullptr ? std::string_view() : std::string_view(user);
}

HandshakeWatch::HandshakeWatch(zmq::context_t& context, zmq::socket_t& socket, std::string peer, bool keyed,
                               bool server, bool refused_is_final, std::chrono::milliseconds refused_grace)
    : peer_(std::move(peer)),
      keyed_(keyed),
      server_(server),
      refused_is_final_(refused_is_final),
      refused_grace_(refused_grace) {
  static std::atomic<int64_t> next{0};
  const std::string url = fmt::format("inproc://handshake-{}", next.fetch_add(1));
  if (zmq_socket_monitor(socket.handle(), url.c_str(),
                         ZMQ_EVENT_CONNECTED | ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                             ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | (refused_is_final ? ZMQ_EVENT_CONNECT_RETRIED : 0)) != 0)
    throw zmq::error_t();
  monitor_ = zmq::socket_t(context, zmq::socket_type::pair);
  monitor_.set(zmq::sockopt::linger, 0);
  // No bound on the events waiting here: ZeroMQ sends them blocking, so a
  // full queue (a flood of connections between two polls) would stall the
  // watched socket's I/O thread.
  monitor_.set(zmq::sockopt::rcvhwm, 0);
  monitor_.connect(url);
}

void HandshakeWatch::limit_connections(int port, ConnectionLimits limits) {
  guard_ = std::make_unique<ConnectionGuard>(peer_, port, limits);
}

std::string HandshakeWatch::poll() {
  // A bounded batch: a flood's events wait for the next call, and the
  // caller's loop goes on.
  for (int n = 0; n < kEventsPerPoll; ++n) {
    zmq::message_t event, address;
    if (!monitor_.recv(event, zmq::recv_flags::dontwait)) break;
    if (event.more()) (void)monitor_.recv(address);
    if (event.size() < 6) continue;
    uint16_t kind = 0;
    uint32_t value = 0;
    std::memcpy(&kind, event.data(), 2);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, 4);
    if (server_) {
      serve_event(kind, value);
      continue;
    }
    if (!failure_.empty()) continue;
    switch (kind) {
      case ZMQ_EVENT_CONNECTED:
        connected_ = ever_connected_ = true;
        down_since_ = {};
        break;
      case ZMQ_EVENT_CONNECT_RETRIED: {
        // Retried before it ever connected: the TCP connection failed at
        // once (refused, or no route), unlike a silent host's. Only after
        // refused_grace_ of that, so that an agent started just before (a
        // script's `rill agent &` then `rill submit`) is waited for. A link
        // that worked and dropped is left to ZeroMQ's reconnects.
        if (!refused_is_final_ || ever_connected_) break;
        const auto now = std::chrono::steady_clock::now();
        if (first_refused_ == std::chrono::steady_clock::time_point{}) first_refused_ = now;
        if (now - first_refused_ >= refused_grace_) {
          const std::string lasting =
              refused_grace_.count() > 0 ? fmt::format(" for {:g} s", refused_grace_.count() / 1000.0) : "";
          failure_ = fmt::format("{} cannot be reached: the connection was refused or had no route{} (is its agent "
                                 "running, on this address?)",
                                 peer_, lasting);
          unreachable_ = true;
        }
        break;
      }
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED: succeeded_ = true; break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        failure_ = fmt::format("{} refused this side's key (ZAP status {})", peer_, value);
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
          failure_ = keyed_ ? fmt::format("{} holds no cluster key (an agent started with --insecure?) while this "
                                          "side holds one",
                                          peer_)
                            : fmt::format("{} requires the cluster key: name its key file with --key or {}", peer_,
                                          kKeyFileEnv);
        else
          failure_ = fmt::format("the handshake with {} failed (ZeroMQ protocol error {:#x}): another cluster key?",
                                 peer_, value);
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        // What a CURVE client sees when the server cannot open its hello.
        failure_ = keyed_ ? fmt::format("{} refused the handshake: its cluster key is not this one", peer_)
                          : fmt::format("{} refused the handshake: it requires the cluster key (name its key file "
                                        "with --key or {})",
                                        peer_, kKeyFileEnv);
        break;
      case ZMQ_EVENT_DISCONNECTED:
        // A CURVE server that cannot open this side's hello (derived from
        // another key) drops the connection without a word.
        if (keyed_ && connected_ && !succeeded_)
          failure_ = fmt::format("{} closed the connection during the handshake: its cluster key is not this one", peer_);
        if (connected_ && succeeded_ && down_since_ == std::chrono::steady_clock::time_point{})
          down_since_ = std::chrono::steady_clock::now();
        connected_ = false;
        break;
      default: break;
    }
  }
  return failure_;
}

// A listening socket's events: ACCEPTED(fd), then for a connection that
// fails its handshake HANDSHAKE_FAILED_*, then DISCONNECTED(fd). The failure
// is counted as it comes; its DISCONNECTED may come after other
// connections' events (the socket's own thread ends the session), so the
// address logged with a refusal is that of the next connection to close:
// right unless several fail at once. The peer's address is taken when it is
// accepted.
void HandshakeWatch::serve_event(uint16_t kind, uint32_t value) {
  using Clock = std::chrono::steady_clock;
  switch (kind) {
    case ZMQ_EVENT_ACCEPTED: {
      const int fd = static_cast<int>(value);
      const std::string address = socket_peer_address(fd);
      accepted_[fd] = address.empty() ? "a peer (gone before its address was read)" : address;
      if (guard_) guard_->accepted(fd, Clock::now());
      break;
    }
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED: pending_.clear(); break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      refused_.fetch_add(1, std::memory_order_relaxed);
      pending_ = value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
                     ? (keyed_ ? "it holds no cluster key" : "it holds a cluster key and this agent none (--insecure)")
                     : "its cluster key is not this one";
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      refused_.fetch_add(1, std::memory_order_relaxed);
      pending_ = "its key is not one this port admits (on a data port: no rank's password for this process)";
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      refused_.fetch_add(1, std::memory_order_relaxed);
      pending_ = keyed_ ? "its handshake failed (it holds no cluster key, or another)" : "its handshake failed";
      break;
    case ZMQ_EVENT_DISCONNECTED: {
      if (guard_) guard_->closed(static_cast<int>(value));
      auto it = accepted_.find(static_cast<int>(value));
      // A peer that fails at once may be gone before its address is read.
      const std::string address = it == accepted_.end() ? "a peer (gone before its address was read)" : it->second;
      if (it != accepted_.end()) accepted_.erase(it);
      if (pending_.empty()) break;
      std::string host = address.substr(0, address.rfind(':'));
      if (last_logged_.size() >= kLoggedAddresses && !last_logged_.contains(host)) host = "other addresses";
      auto& last = last_logged_[host];
      if (Clock::now() - last >= std::chrono::seconds(10)) {
        spdlog::warn("{}: refused a connection from {}: {}", peer_, address, pending_);
        last = Clock::now();
      }
      pending_.clear();
      break;
    }
    default: break;
  }
}

}  // namespace rill::comm
