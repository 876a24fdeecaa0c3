// Transport: a peer-to-peer message plane among world() ranks (nodes). Each
// message has a 64-bit tag and bytes (a header followed by a body); per
// (sender, receiver, tag) the order of messages is preserved.
//
// Three implementations: ZeroMQ over TCP (make_zmq_transport), in-process
// queues for unit tests (make_inproc_transports), and a fault-injecting
// wrapper (FaultyTransport, comm/faulty_transport.h).
//
// Threads: send, recv and recv_message may be called from any thread, and
// from several at once. Handlers run on the transport's receive threads
// (ZeroMQ's; the shared-memory lane thread's for peers of the same machine),
// one at a time.
// close() may be called from any thread except a handler; after it returns
// no handler runs and no body handed to send() is read any more.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "comm/tcp_link.h"

namespace rill::comm {

struct ClusterKey;  // comm/cluster_key.h
// A transport's session id: 32 random bytes made when it starts
// (Transport::session).
using SessionId = std::array<uint8_t, 32>;

struct Endpoint {
  std::string address;  // an IPv4/IPv6 literal or a host name
  int port = 0;         // a node's data port
  bool operator==(const Endpoint&) const = default;
};

using Clock = std::chrono::steady_clock;

// Counts message bodies that a transport may still read after send()
// returned (bodies sent without a copy). A sender that must reuse or free a
// body before the peer answers waits for the count to drain. Thread-safe. It
// may be destroyed with bodies in flight: its count lives until they drain.
class SendTracker {
 public:
  SendTracker();
  ~SendTracker();
  SendTracker(const SendTracker&) = delete;
  SendTracker& operator=(const SendTracker&) = delete;

  // Waits until no tracked body is in flight; kDeadlineExceeded otherwise.
  Status wait(Clock::time_point deadline) const;
  int64_t in_flight() const;

  // For transports: acquire() before handing a body to the wire, and
  // release(token) exactly once when the wire no longer reads it.
  void* acquire();
  static void release(void* token);

 private:
  struct State;
  State* state_;
};

// A received message seen in place: its bytes are `first` followed by
// `second` (a transport may hold header and body in separate buffers).
struct MessageView {
  std::span<const std::byte> first;
  std::span<const std::byte> second;
  // It came sealed (comm/data_cipher.h): its integrity is checked already.
  bool sealed = false;
  size_t size() const { return first.size() + second.size(); }
  void copy_to(std::byte* destination) const;
};

// A message taken out of a transport without a copy: it keeps the
// transport's buffers alive until reset() or destruction. Move-only.
class Received {
 public:
  struct Holder {
    virtual ~Holder() = default;
  };
  Received() = default;
  Received(std::unique_ptr<Holder> holder, MessageView view) : holder_(std::move(holder)), view_(view) {}
  const MessageView& view() const { return view_; }
  size_t size() const { return view_.size(); }
  void reset() {
    holder_.reset();
    view_ = {};
  }

 private:
  std::unique_ptr<Holder> holder_;
  MessageView view_;
};

// A handler sees a message as it lies in the transport's buffers: its
// bytes are message.first then message.second (a large body stays in its
// own buffer, not copied to join the header). message.first is 8-byte
// aligned.
using Handler = std::function<void(int from, const MessageView& message)>;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;

  // Sends header + body as one message to rank `to` (to != rank()). The
  // header is copied. The body may be sent without a copy: it must stay
  // unchanged until the peer has replied at the protocol level, or, when
  // `tracker` is given, until tracker->wait() returns ok. After an error it
  // must stay alive until close() returned.
  virtual Status send(int to, uint64_t tag, std::span<const std::byte> header,
                      std::span<const std::byte> body = {}, SendTracker* tracker = nullptr) = 0;

  // Blocks until a message with `tag` from `from` arrives and hands it over
  // without a copy. kDeadlineExceeded (naming peer and tag) when the
  // deadline passes first; kUnavailable when the transport is closed or the
  // peer is lost (messages that arrived before are still delivered).
  virtual Status recv_message(int from, uint64_t tag, Clock::time_point deadline, Received* out) = 0;

  // As recv_message, but copies the message into `out` (resized; reuse it to
  // avoid allocation).
  Status recv(int from, uint64_t tag, std::vector<std::byte>* out, Clock::time_point deadline);

  // Messages with `tag` are passed to `handler` on the receive thread instead
  // of the mailbox (actor messages use this), one at a time, in order. The
  // view is valid during the call only. Set before traffic
  // with that tag starts, and not from a handler; an empty handler removes
  // the tag's (later messages go to the mailbox). Once set_handler returns,
  // the old handler is not running and is not called again. A handler may
  // send.
  virtual void set_handler(uint64_t tag, Handler handler) = 0;

  // From now on, messages whose tag is outside [lo, hi) and that no handler
  // takes are dropped and counted (logged at most every 10 s), and queued ones
  // outside it are freed: a finished job's stragglers and a peer's garbage
  // cannot pile up. Default: every tag is accepted.
  virtual void accept_tags(uint64_t lo, uint64_t hi) = 0;
  // Every recv waiting, or later waiting, for a tag in [lo, hi) fails with
  // kAborted and `reason` (a run that was aborted: its receives end now, not
  // at their deadlines).
  virtual void cancel_tags(uint64_t lo, uint64_t hi, const std::string& reason) = 0;
  // Messages larger than `bytes` (header and body) are dropped as
  // malformed from now on: a run sets what its plan can send (0: no limit,
  // the default). Transports that cannot receive from outside ignore it.
  virtual void limit_message_bytes(size_t /*bytes*/) {}
  // At most `bytes` of messages from one peer wait unread (in the mailbox:
  // taken by no handler, not yet received); a peer that sends past it is
  // cut off (its later messages dropped) and lost, named, so a flooding
  // peer cannot grow memory past it. A run sets it from its plan (0: no
  // bound, the default). Transports that cannot receive from outside ignore
  // it.
  virtual void limit_unread_bytes(size_t /*bytes*/) {}
  // The largest message body the transport can take from a peer (0: no
  // limit): a run whose plan has a larger regst is refused at build.
  virtual size_t max_message_bytes() const { return 0; }
  // Messages dropped so far: outside the accepted tags, or malformed.
  virtual int64_t received_dropped() const = 0;
  // Connections refused at their handshake so far: with a key, whoever did
  // not give a rank's password for this process (comm/zap_authenticator.h).
  virtual int64_t refused_handshakes() const { return 0; }
  // Bytes a transport copied to hand messages to handlers (a header moved
  // to an aligned buffer); 0 where it never copies.
  virtual int64_t handler_bytes_copied() const { return 0; }
  // What the kernel counted on this rank's TCP connection to each peer
  // (index = rank), cumulative over the connection; nullopt where there is
  // none (this rank, a peer reached through shared memory, a transport
  // without sockets). Empty: this transport has no TCP connections.
  virtual std::vector<std::optional<TcpLinkCounters>> link_counters() const { return {}; }
  // True once the connection to `rank` is known lost (its process died or
  // closed its transport): callers may act on it at once instead of waiting
  // for a heartbeat to time out.
  virtual bool peer_lost(int rank) const = 0;
  // Forgets that `rank` was lost: its process has been restarted and listens
  // on the same endpoint (an elastic restart). What the lost process sent and
  // no recv took yet is freed; later sends go to the new process. Call it
  // once the new process's transport has started, before any message is
  // exchanged with it. (In-process: a rank reopened on the hub.)
  virtual void revive(int /*rank*/) {}

  // This rank's session id, which every other rank must be given over an
  // authenticated channel (the agents' control plane, the rendezvous), and
  // each other rank's. It names the rank's shared-memory inbox, so a local
  // peer sends through shared memory only once it has the id (until then
  // it queues, then falls back to TCP); in a keyed cluster
  // (comm/data_cipher.h) it keys the links too, and messages to or from a
  // rank whose id this transport was not given are refused (a send fails
  // naming it; what it sends is dropped). A restarted rank's new id is set
  // before revive(); setting the id a rank has changes nothing. In-process
  // transports have none: nothing to set.
  virtual const SessionId* session() const { return nullptr; }
  // Whether every message to `peer` goes sealed, so the receiver sees it
  // with MessageView::sealed and a checksum of its own adds nothing.
  virtual bool seals(int /*peer*/) const { return false; }
  virtual void set_peer_session(int /*rank*/, const SessionId& /*session*/) {}
  // Rank `rank`'s process listens at `endpoint` now (an agent that took the
  // rank's place at another address): what is sent to it goes there, its
  // connections from that address are admitted, and a rank away from the
  // address it started at talks TCP (no shared memory) with everyone. Set
  // before its new session id and revive(); the endpoint it has changes
  // nothing. Errors: the address does not resolve, is a wildcard, or is of
  // another family than this rank's; a transport whose ranks have no
  // addresses (in-process) refuses every move.
  virtual Status set_peer_endpoint(int rank, const Endpoint& endpoint);

  // Stops the receive thread, wakes every waiting recv with kUnavailable and
  // drops unsent messages (ZeroMQ: linger 0, so a process never hangs at
  // exit). Idempotent.
  virtual void close() = 0;
};

struct ZmqOptions {
  // ZeroMQ I/O threads per transport. The data port's connection bounds
  // count by descriptor and assume one: with more, a closed connection's
  // end and the accept of another that reuses its descriptor may be told
  // out of order, and that one goes uncounted (benchmarks only).
  int io_threads = 1;
  std::chrono::milliseconds heartbeat_interval{2000};       // ZMTP ping on each connection
  std::chrono::milliseconds heartbeat_timeout{20000};       // no traffic for this long: the link is lost
  std::chrono::milliseconds peer_lost_grace{300};           // lets bytes already sent arrive before a
                                                            // disconnect is reported
  size_t inline_body_bytes = 16384;                         // smaller bodies are copied into the header frame
  // The largest frame the data port takes (ZeroMQ refuses a larger one
  // before storing it, and drops the connection), and how many messages
  // ZeroMQ holds per connection before TCP pushes back on the sender: what
  // a peer can make this process buffer beyond the mailbox's bound
  // (limit_unread_bytes) is (receive_hwm + 1) x max_message_bytes.
  size_t max_message_bytes = size_t{1} << 30;
  int receive_hwm = 32;
  // The connections the data port keeps, per source address and in all
  // (0: world + 16 per address, 4 x world + 64 in all: every rank's, and a
  // restarted one's, with room to spare); a connection over either is cut
  // as it is accepted (comm/connection_guard.h), so the bound above holds
  // for the port as a whole: at most max_connections x (receive_hwm + 1) x
  // max_message_bytes. A connection that has not finished ZMTP's handshake
  // within handshake_interval is dropped.
  int max_connections_per_address = 0;
  int max_connections = 0;
  std::chrono::milliseconds handshake_interval{3000};
  // The data port keeps only connections from its endpoints' addresses (a
  // stranger elsewhere is cut at once, taking none of the bounds above), and
  // each rank connects from its own endpoint's address, so a machine with
  // several addresses is seen at the one the list names. Off where an
  // endpoint is a wildcard (0.0.0.0), whose connections come from any
  // address, and where the list mixes IPv4 and IPv6.
  bool listed_peers_only = true;
  // Ranks whose endpoints resolve to the same address share a machine and
  // send through shared memory (comm/shm_lanes.h): rings of this many bytes
  // (a power of two), polled by a waiting receiver for up to shm_spin
  // before it sleeps. A rank's inbox is named shm_name_prefix + 32 hex
  // digits of its session id (random: no other user can foresee it), made
  // O_EXCL with mode 0600, and opened by a peer only if it is that peer's
  // user's, mode 0600, of an inbox's size: ranks of different users talk
  // over TCP. A local peer is sent to over TCP from then on, in order with
  // what was queued for it, at once when its inbox is refused, and when
  // its inbox cannot be found although its TCP connection has been up for
  // shm_fallback_after (its /dev/shm is not this one's: a container with
  // the host's network but an IPC namespace of its own, or another prefix;
  // or its session id was never given). Every rank of a run must agree on
  // shared_memory.
  bool shared_memory = true;
  bool log_shared_memory = false;  // say at start which ranks go through shared memory (agents do)
  size_t shm_ring_bytes = size_t{4} << 20;
  std::chrono::microseconds shm_spin{200};
  std::string shm_name_prefix = "/rill-";
  std::chrono::milliseconds shm_fallback_after{1000};
  // close() waits up to this long for what was sent to leave (a peer that
  // is gone or never came holds it that long), so a process that sends and
  // then exits loses nothing it sent.
  std::chrono::milliseconds close_linger{1000};
  // With a cluster key every message over TCP is sealed with AES-256-GCM
  // under its link's key (comm/data_cipher.h): only a holder of the key can
  // send a message a rank accepts, and a message sealed for one link, or for
  // an earlier incarnation of either end, or replayed, is dropped as
  // malformed. The sockets themselves are plain ZMTP (NULL mechanism): a
  // stranger may connect, and what it sends is dropped and counted. Peers on
  // this machine use shared memory (its inboxes are open to this user alone,
  // mode 0600). Every rank must agree.
  // `session`: this rank's session id (all zeros: the transport makes one
  // at start; with or without a key).
  // `peer_sessions`: every rank's session id where the caller knows them at
  // start (the rendezvous's), set before the transport receives anything:
  // a peer that starts sooner may send at once, and a message whose link
  // key is not known yet would be dropped. Empty: set_peer_session later.
  std::shared_ptr<const ClusterKey> key;
  SessionId session{};
  std::vector<SessionId> peer_sessions;
  // This rank's entry of the machine list, where it listens elsewhere
  // (endpoints[rank]: an agent in a lost rank's place). Away from it, it
  // starts without shared memory: its peers send to it over TCP
  // (Transport::set_peer_endpoint). Empty address: where it listens.
  Endpoint listed_endpoint;
};

// ZeroMQ over TCP: binds endpoints[rank], connects to every other rank (one
// connection per peer pair and direction), and runs one receive thread that
// dispatches to handlers and the mailbox. Sends to one peer from several
// threads are serialized on that peer's socket. Errors: a port in use
// ("address 127.0.0.1:9989 is already in use"), an address that does not
// parse or resolve, a rank out of range.
StatusOr<std::unique_ptr<Transport>> make_zmq_transport(int rank, std::vector<Endpoint> endpoints,
                                                        ZmqOptions options = {});

// For a program's main, process-wide: keeps freed large blocks mapped
// (glibc malloc's mmap and trim thresholds) so that ZeroMQ's per-message
// receive buffers are reused instead of page-faulted in again for every
// large message (about a fifth of the CPU time of a large all_reduce).
// Returns false where the allocator has no such settings.
bool keep_large_buffers_mapped();

// `world` transports in one process that talk through in-memory queues
// (unit tests). Bodies are copied at send, so a tracker never waits.
std::vector<std::unique_ptr<Transport>> make_inproc_transports(int world);

// "tag 42" style description used in error messages.
std::string describe_tag(uint64_t tag);

}  // namespace rill::comm
