// The cluster key: one 32-byte secret, held in a key file by every agent and
// client of a cluster, from which every CurveZMQ key pair is derived (libsodium:
// a keyed BLAKE2b of the identity's name is the seed of its Curve25519 pair).
// Identities: "node-R" for the agent of rank R (its control socket serves
// with node-R's pair and it connects with it; the launcher's rendezvous
// likewise), "client" for `rill submit`, `rill status` and rill::Client. The
// data plane seals its messages under keys of its own, also made from the
// secret (comm/data_cipher.h).
//
// A server socket (curve_server) answers only peers that complete the CURVE
// handshake with its public key, which only a holder of the secret can derive;
// a ZapAuthenticator on the server's ZeroMQ context then names the peer by its
// public key (ZeroMQ's User-Id of every message it sends: "node-R" or
// "client") and refuses any other key. Everything on such a socket is
// encrypted and authenticated per frame by ZeroMQ (CurveZMQ, RFC 26).
//
// Thread-safety: ClusterKey and the functions are values and pure functions;
// a ZapAuthenticator runs its own thread and is destroyed from one thread.
#pragma once

#include <fcntl.h>

#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "base/status.h"
#include "comm/connection_guard.h"

namespace rill::comm {

struct ClusterKey {
  std::array<uint8_t, 32> secret{};
  bool operator==(const ClusterKey&) const = default;
};

// A fresh key from the operating system's random source.
StatusOr<ClusterKey> generate_cluster_key();
// Writes `key` to `path` (mode 0600, replacing no existing file unless
// `overwrite`): a comment line and the secret in Z85.
Status write_key_file(const std::string& path, const ClusterKey& key, bool overwrite = false);
// `key` as a key file in memory that no path names (a memfd, mode 0600),
// open as the returned descriptor, which child processes inherit: they
// read it as /proc/self/fd/N.
StatusOr<int> key_in_memory(const ClusterKey& key);
// Writes `text` to a file of `path` only its owner can read (created 0600,
// never through a symbolic link, replacing no file unless `overwrite`).
Status write_private_file(const std::string& path, const std::string& text, bool overwrite);
// The lines of a key file (cluster or client key) that are not comments,
// trimmed, with their numbers; errors name the file (missing, not a regular
// file, another user's, readable by others than its owner, unreadable).
// The file is opened once and checked as opened, and registered as a key
// this process holds (base/file_access.h: never read as data).
struct KeyLine {
  int number = 0;
  std::string text;
};
// Where a key file is opened: by path (links followed), or `name` in an
// open folder `dir` without following a link (the default key's folder,
// checked as opened first).
struct KeyFileAt {
  int dir = AT_FDCWD;
  std::string name;
  bool follow_links = true;
};
StatusOr<std::vector<KeyLine>> read_key_lines(const std::string& path, const KeyFileAt& at = {});
// 32 key bytes as the 40 Z85 characters key files hold, and back (false:
// not such a text).
std::string z85_key(const std::array<uint8_t, 32>& bytes);
bool z85_key(std::string_view text, std::array<uint8_t, 32>* out);
// Reads a key file; errors name the file and what is wrong with it (missing,
// unreadable, not a key, readable by others than its owner).
StatusOr<ClusterKey> read_key_file(const std::string& path, const KeyFileAt& at = {});

// The environment variable that names a key file where no flag does.
inline constexpr const char* kKeyFileEnv = "RILL_KEY_FILE";
// The key a command uses (comm/default_key.h): the file $RILL_KEY_FILE names
// (`rill ... --key FILE` sets it for the command and what it starts), none
// under $RILL_INSECURE, else the user's default key if it exists; nullptr
// for none. Errors are read_key_file's. (Defined in default_key.cc.)
StatusOr<std::shared_ptr<const ClusterKey>> key_from_environment();

std::string node_identity(int rank);  // "node-R"
inline constexpr std::string_view kClientIdentity = "client";
// The routing id node R's agent connects to the master's control port with:
// "node-R." and 16 random hex digits, new for each process. Its rank says
// who it is; its random part is what no other peer can guess, so no peer
// can take it first and keep the node out (a ROUTER socket refuses a second
// connection with a routing id it holds already).
std::string node_routing_id(int rank);
// The rank a routing id names ("node-R" or "node-R.anything"), or -1 when it
// names no node.
int routing_id_rank(std::string_view routing_id);

// The bearer token of the master's HTTP endpoint (dashboard, /metrics,
// /api) in a keyed cluster: 32 hex digits of a keyed BLAKE2b of the secret,
// one-way (it gives away no key and no CURVE pair). `rill token` prints it.
std::string http_token(const ClusterKey& key);

struct CurveKeyPair {
  std::array<uint8_t, 32> public_key{}, secret_key{};
  bool operator==(const CurveKeyPair&) const = default;
};
CurveKeyPair derive_key_pair(const ClusterKey& key, std::string_view identity);

// Makes `socket` a CURVE server with node `rank`'s pair (before bind).
void curve_server(zmq::socket_t& socket, const ClusterKey& key, int rank);
// Makes `socket` a CURVE client as `identity`, of node `server_rank`'s
// server (before connect).
void curve_client(zmq::socket_t& socket, const ClusterKey& key, std::string_view identity, int server_rank);

// The authenticated identity of a message's sender on a CURVE socket ("" on
// a socket without CURVE); valid while `message` lives. Allocates nothing.
std::string_view authenticated_identity(const zmq::message_t& message);

// Watches a socket's handshakes (ZeroMQ's socket monitor). On a client
// socket (`server` false) poll() tells, once a connection was refused (no
// key, another key, or a peer without one), what went wrong, naming `peer`.
// On a listening socket (`peer` then names the listener, "node-1: control
// port") poll() logs each refused connection with its address, at most once
// per address every 10 s, and counts it. With `refused_is_final` (a client
// asking a running agent, not one waiting for a peer to start), a TCP
// connection the peer's host keeps refusing (nothing listens there) for
// `refused_grace` (0: the first refusal) is the failure, instead of ZeroMQ
// retrying it quietly to the timeout. Call poll() from the socket's thread.
class HandshakeWatch {
 public:
  HandshakeWatch(zmq::context_t& context, zmq::socket_t& socket, std::string peer, bool keyed, bool server = false,
                 bool refused_is_final = false, std::chrono::milliseconds refused_grace = std::chrono::seconds(3));
  std::string poll();
  // Any thread.
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  // On a listening socket on `port`: bounds the connections its peers hold
  // (comm/connection_guard.h), from the next poll() on.
  void limit_connections(int port, ConnectionLimits limits);
  // The addresses admitted from now on, where only listed ones are
  // (ConnectionLimits::admitted).
  void set_admitted(std::vector<std::string> addresses) {
    if (guard_) guard_->set_admitted(std::move(addresses));
  }
  int64_t cut() const { return guard_ ? guard_->cut() : 0; }
  // poll()'s failure is that the peer could not be reached (refused_is_final).
  bool unreachable() const { return unreachable_; }
  // A client's link, once through its handshake, closed at this time (as of
  // the last poll()) and not connected since; the epoch while it is up or
  // never was. ZeroMQ connects again by itself, so a peer whose process
  // lives is back within its reconnect interval: a link down for longer
  // has a peer whose port refuses (its process is gone). A silent link (a
  // cable cut, a machine hung) never closes here.
  std::chrono::steady_clock::time_point down_since() const { return down_since_; }
  void* handle() { return monitor_.handle(); }  // readable when events wait

 private:
  void serve_event(uint16_t kind, uint32_t value);
  static constexpr int kEventsPerPoll = 4096;

  zmq::socket_t monitor_;
  std::string peer_;
  bool keyed_, server_, refused_is_final_;
  bool succeeded_ = false, connected_ = false, ever_connected_ = false, unreachable_ = false;
  std::chrono::milliseconds refused_grace_;
  std::chrono::steady_clock::time_point first_refused_{};
  std::chrono::steady_clock::time_point down_since_{};
  std::string failure_;
  std::map<int, std::string> accepted_;  // server: fd -> the peer's address
  std::string pending_;                  // server: why the last handshake failed
  // When each address's refusal was last logged: at most kLoggedAddresses
  // of them, the rest under one entry ("other addresses"), so a flood from
  // a network's worth of addresses holds a bounded map.
  static constexpr size_t kLoggedAddresses = 4096;
  std::map<std::string, std::chrono::steady_clock::time_point> last_logged_;
  std::atomic<int64_t> refused_{0};
  std::unique_ptr<ConnectionGuard> guard_;  // server: null when connections are not limited
};

}  // namespace rill::comm
