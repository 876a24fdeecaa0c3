// The ZeroMQ transport's lanes to the ranks of its own machine (those whose
// endpoint resolves to the same address): messages go through shared-memory
// rings (comm/shm_ring.h) instead of TCP, written by the sending thread and
// read by the receiving one, with no I/O thread between them. ZeroMQ stays
// the transport between machines, and keeps a connection to every local
// peer too: its monitor still tells when one dies.
//
// Receiving: a lane thread drains the rings and sleeps on the inbox's
// doorbell when all are empty; a thread waiting for a message from a local
// peer first polls that peer's ring itself for up to ZmqOptions::shm_spin
// (as MPI's shared-memory transports do), so a reply a few microseconds away
// costs no wake-up at all.
//
// Sending: a record is written straight into the peer's ring; a message
// larger than a quarter of the ring is cut into several. A sender waits for
// room, except on a receive thread (the lane thread, or the ZeroMQ receive
// thread running a handler): there, and while the peer's inbox is not known
// or not created yet, the message is copied into a queue that the lane
// thread writes out in order. So no receiving thread ever blocks on a peer,
// and two ranks sending to each other cannot deadlock.
//
// Names and trust. A rank's inbox is named after its transport's session id
// (inbox_name: 128 random bits made when the transport starts), which its
// peers learn over the control plane (set_peer_name), so no other user can
// foresee the name, let alone create it first. An inbox is opened only if it
// is this user's own, mode 0600, of the expected size (ShmInbox::open); one
// that is not is named in one log line and its rank is sent to over TCP,
// as is a rank whose inbox is still not found once its TCP connection has
// been up for ZmqOptions::shm_fallback_after. A rank that cannot create its
// own inbox (the name is taken, /dev/shm is full) is sent to over TCP by
// everyone, and sends over TCP itself. The creator removes the name once
// every peer has attached, or when its transport closes; what a creator
// killed before that leaves, the next lanes of this user remove once it was
// made 10 minutes ago (ShmInbox::remove_stale).
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "comm/shm_ring.h"
#include "comm/transport.h"

namespace rill::comm {

// A received message's bytes, owned.
struct BytesHolder final : Received::Holder {
  std::vector<std::byte> bytes;
};

// The inbox name of the rank whose transport has `session`: `prefix` and
// the hex of the session id's first 16 bytes.
std::string inbox_name(const std::string& prefix, const SessionId& session);

class ShmLanes {
 public:
  // Hands over one whole message: `bytes` are valid during the call only;
  // `keep`, when given, owns them (a message that came in several records).
  using Deliver =
      std::function<void(int from, uint64_t tag, std::span<const std::byte> bytes, std::unique_ptr<BytesHolder> keep)>;
  // A peer's ring held what no sender writes: the peer is to be reported lost.
  using Broken = std::function<void(int from, const std::string& reason)>;
  using Lost = std::function<bool(int rank)>;
  // Whether messages with `tag` go to a handler: those are left to the lane
  // thread, so handlers run on the transport's receive threads only.
  using Handled = std::function<bool(uint64_t tag)>;
  // How long the TCP connection to `rank` has been up (zero: it is not).
  using ConnectedFor = std::function<Clock::duration(int rank)>;
  // Sends over TCP (a lane that fell back).
  using SendTcp = std::function<Status(int to, uint64_t tag, std::span<const std::byte> header,
                                       std::span<const std::byte> body)>;

  // `local[r]`: rank r shares this rank's machine (false for itself).
  // `name`: this rank's inbox name. Creates the inbox and starts the lane
  // thread when there is a local peer. Errors: kInvalidArgument for ring
  // sizes, otherwise why the inbox could not be created (the transport
  // then goes without shared memory).
  static StatusOr<std::unique_ptr<ShmLanes>> start(int rank, std::vector<bool> local,
                                                   std::string name, const ZmqOptions& options,
                                                   Deliver deliver, Broken broken, Lost lost, Handled handled,
                                                   ConnectedFor connected_for, SendTcp send_tcp);
  ~ShmLanes();

  // Whether messages to `peer` go through shared memory: it shares this
  // machine, and its inbox has not proved invisible from here.
  bool is_local(int peer) const {
    return peer >= 0 && peer < static_cast<int>(local_.size()) && local_[peer] &&
           !lanes_[peer]->tcp.load(std::memory_order_acquire) && !lanes_[peer]->away.load(std::memory_order_acquire);
  }
  // Messages sent from this thread are queued instead of waiting for room.
  void set_receive_thread(std::thread::id id) { zmq_receiver_.store(id); }
  // Rank `peer`'s inbox name, from its session id; until it is given,
  // messages to it are queued. A restarted peer's new name is set before
  // revive(peer).
  void set_peer_name(int peer, const std::string& name);

  // Sends header + body (copied into the peer's ring before it returns, or
  // into the queue). Errors: the lanes are closed, the peer is lost. Sets
  // *use_tcp (and sends nothing) when the lane has fallen back to TCP.
  Status send(int to, uint64_t tag, std::span<const std::byte> header, std::span<const std::byte> body,
              bool* use_tcp);
  // Polls `from`'s ring on this thread until `arrived()` or the spin time
  // passes (messages it drains are delivered as the lane thread would).
  void poll(int from, const std::function<bool()>& arrived);
  // Around blocking for a message from `from`: senders then wake the lane
  // thread for it (what came before is delivered by begin_block).
  void begin_block(int from);
  void end_block(int from);
  // Whether some tag has a handler: every message is then read at once.
  void set_eager(bool eager);
  // Delivers what `from` has written so far (before a loss is reported).
  void drain(int from);
  // A local peer's process was restarted: its new inbox is opened at the
  // next send, what was queued for the old one is dropped, and a message it
  // left half-written in this rank's inbox is thrown away. A loss report of
  // the lane thread's already under way (the old process seen gone) ends
  // before this returns, so the caller's revive of its own state undoes it;
  // one begun later looks at the new inbox. Never from a message handler
  // (it may run on the lane thread, making that report).
  void revive(int peer);
  // A local peer's rank listens at another address now (`away`), or at the
  // one it started at again: while away its messages go over TCP both ways
  // (its process was started elsewhere, without lanes), and its inbox is
  // not watched. Set before revive(peer) for its new process.
  void set_away(int peer, bool away);
  // Waits until nothing is queued for a peer's inbox (the lane thread writes
  // it out as room and inboxes appear), or `deadline`.
  void flush(Clock::time_point deadline);
  // Stops the lane thread and unmaps everything; later sends fail.
  void close();

 private:
  struct Outgoing {
    uint64_t tag = 0;
    std::vector<std::byte> bytes;  // queued: header and body, copied
    uint64_t written = 0;
  };
  struct Lane {
    int slot_in = -1;   // the peer's ring in this rank's inbox
    int slot_out = -1;  // this rank's ring in the peer's inbox
    std::mutex name_mu;
    std::string name;   // the peer's inbox; guarded by name_mu; empty until set_peer_name
    std::mutex send_mu;                 // one producer at a time; receive threads never wait for it
    std::unique_ptr<ShmInbox> outbox;   // the peer's inbox; guarded by send_mu
    std::mutex queue_mu;                // taken after send_mu, or alone
    std::deque<Outgoing> queued;        // guarded by queue_mu; its front written only under send_mu
    std::atomic<bool> has_queued{false};
    std::mutex consume_mu;              // one consumer at a time
    std::unique_ptr<BytesHolder> partial;  // a message arriving in several records; guarded by consume_mu
    bool partial_handled = false;          // `partial` goes to a handler; guarded by consume_mu
    bool broken = false;                   // guarded by consume_mu
    // Held by the lane thread from its look at the peer's process to the end
    // of its report, and by revive: a report never straddles a revive.
    // Taken before send_mu; the lane thread only tries it.
    std::mutex report_mu;
    std::atomic<bool> gone{false};         // reported exited or closed
    // The peer's inbox is not visible from here: its messages go over TCP.
    // Set under send_mu and queue_mu, after the queue went out over TCP.
    std::atomic<bool> tcp{false};
    std::atomic<bool> away{false};  // set_away: kept through revive()
  };
  // Forgets what the lane held of a peer's old process (revive, set_away);
  // under its report_mu.
  void reset_locked(Lane& lane);

  ShmLanes(int rank, std::vector<bool> local, std::string name, const ZmqOptions& options, Deliver deliver,
           Broken broken, Lost lost, Handled handled, ConnectedFor connected_for, SendTcp send_tcp);
  // Delivers what `from` wrote; a waiting thread (`waiter`) stops at a
  // handler's message and wakes the lane thread. REQUIRES: lane.consume_mu.
  bool drain_locked(int from, Lane& lane, bool waiter);
  // The peer's inbox: open; not known or not created yet; or refused, with
  // why in *why. REQUIRES: lane.send_mu held.
  enum class Outbox { kOpen, kAbsent, kRefused };
  Outbox open_outbox(int to, Lane& lane, std::string* why);
  // Writes what fits of a message from message byte `*written` on:
  // kWritten once all of it is in the ring; kFull when the rest waits for
  // room; kCorrupt when the ring's positions are not what a ring holds.
  ShmRing::Write write_some(Lane& lane, uint64_t tag, std::span<const std::byte> header,
                            std::span<const std::byte> body, uint64_t* written);
  bool flush_queued(int to, Lane& lane);  // true when nothing is left queued
  // Sends the queue over TCP and routes the lane there; logs `why` (which
  // names the inbox), as a warning when the inbox was `refused`.
  // REQUIRES: send_mu.
  void fall_back(int to, Lane& lane, const std::string& why, bool refused);
  void loop();
  // Reports local peers whose process exited or closed its transport
  // (their ZeroMQ connection may never have come up). Lane thread only.
  void check_peers();
  // Why the owner of `outbox` is gone ("(pid 12) exited"), or "".
  static std::string gone(const ShmInbox& outbox);
  bool on_receive_thread() const;

  const int rank_;
  const std::vector<bool> local_;
  const std::string name_;  // this rank's inbox
  int slots_ = 0;           // rings in each inbox of this machine: its ranks but one
  const ZmqOptions options_;
  const Deliver deliver_;
  const Broken broken_;
  const Lost lost_;
  const Handled handled_;
  const ConnectedFor connected_for_;
  const SendTcp send_tcp_;
  std::unique_ptr<ShmInbox> inbox_;
  std::vector<std::unique_ptr<Lane>> lanes_;  // by rank; null for ranks of other machines
  std::thread thread_;
  std::atomic<std::thread::id> zmq_receiver_{};
  std::atomic<bool> closed_{false};
};

}  // namespace rill::comm
