// ConnectionGuard: bounds what peers that have proven nothing can hold of a
// ZeroMQ listening socket: open connections per source address and in all.
// ZeroMQ accepts every TCP connection it can and keeps it until its
// handshake fails or times out; the listener's socket monitor tells the
// guard of each accepted connection (ZMQ_EVENT_ACCEPTED, with its file
// descriptor) and of each close (ZMQ_EVENT_DISCONNECTED), and the guard cuts
// what is over a limit. A cut is shutdown(fd, SHUT_RDWR), never close(): the
// descriptor stays ZeroMQ's, whose I/O thread sees the connection end and
// closes it itself. Before a cut the guard checks that the descriptor is
// still a connection accepted on its port from the same peer address and
// port, so a descriptor that ZeroMQ closed and the process reused (for
// another peer's connection too) is never touched.
//
// Two ways to count, chosen per listener by ConnectionLimits::young:
// - young > 0 (the control port): only connections accepted less than
//   `young` ago count. The control port drops a connection whose handshake
//   has not finished within its handshake interval (ZMQ_HANDSHAKE_IVL), so
//   with `young` at least that long every connection still in its handshake
//   is counted, and a key holder's (finished in milliseconds) stops counting
//   soon after. Over a limit the oldest counted connection is cut: a
//   flood's connections are cut by its own newer ones.
// - young == 0 (the data port, plain ZMTP, whose handshake proves nothing):
//   every open connection counts, and over a limit the new one is cut, so
//   the peers that connected first (a run's ranks) keep theirs.
// Cuts are counted, and logged at most once per address every 10 s.
//
// What it cannot tell apart: a flood from the same address as an honest
// peer competes with that peer for the address's share (docs/SECURITY.md).
//
// One thread calls it (the one that reads the listener's monitor).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rill::comm {

struct ConnectionLimits {
  int per_address = 32;                // connections counted per source address
  int total = 256;                     // connections counted in all
  std::chrono::milliseconds young{0};  // > 0: only connections this young count; 0: every open one
  // Not empty: a connection from any other address (as socket_peer_address
  // writes it, without its port) is cut at once, never counted.
  std::vector<std::string> admitted;
};

class ConnectionGuard {
 public:
  using Clock = std::chrono::steady_clock;

  // `where` names the listener in logs ("node 0 (127.0.0.1:9988): control
  // port"); `port` is the port it listens on.
  ConnectionGuard(std::string where, int port, ConnectionLimits limits);

  // A connection was accepted: cuts what this puts over a limit.
  void accepted(int fd, Clock::time_point now);
  // It closed (ZeroMQ's DISCONNECTED, or a cut connection's end).
  void closed(int fd);
  // Where only listed addresses are admitted, these are the ones from now
  // on (the ranks' as they moved; a connection open from one no longer
  // listed stays); where every address is, nothing changes (empty: none).
  void set_admitted(std::vector<std::string> addresses);

  // The decision alone, without sockets: records `fd` from `address` and
  // returns the connections to cut (already forgotten), oldest first.
  std::vector<int> admit(int fd, const std::string& address, Clock::time_point now);

  // A connection to cut, with its peer's address and port when it was
  // counted (what its descriptor must still show to be cut).
  struct Cut {
    int fd;
    std::string peer;
  };
  // admit's decision, for `fd` whose peer is `peer` ("1.2.3.4:56").
  std::vector<Cut> admit_peer(int fd, const std::string& address, const std::string& peer, Clock::time_point now);

  int64_t cut() const { return cut_; }
  int counted() const { return static_cast<int>(open_.size()); }

 private:
  struct Open {
    std::string address;  // the peer's, without its port
    std::string peer;     // with its port
    Clock::time_point since;
  };
  // Cuts one connection (the oldest of `address`, or of all when empty; the
  // new one `fd` when every open connection counts).
  int pick(int fd, const std::string& address) const;
  void note_cut(const std::string& address, const std::string& why, Clock::time_point now);
  std::string over(bool per_address) const;  // why a connection over a limit is cut

  const std::string where_;
  const int port_;
  ConnectionLimits limits_;
  std::map<int, Open> open_;  // counted connections, by descriptor
  struct Report {
    int64_t since_logged = 0;
    Clock::time_point logged{};
  };
  std::map<std::string, Report> reports_;  // per address
  int64_t cut_ = 0;
};

// The peer's address of a connected socket, "1.2.3.4:56" or "[::1]:56"
// (`with_port` false: without ":56"); "" when it cannot be read.
std::string socket_peer_address(int fd, bool with_port = true);

}  // namespace rill::comm
