// The data plane's own cipher in a keyed cluster: every message between two
// machines is sealed with AES-256-GCM (libgcrypt, which uses VAES and
// VPCLMULQDQ where the CPU has them: 5.4 GB/s per core on this team's
// machines, against 4.3-4.6 GB/s for Debian's OpenSSL 3.0 and 1.1 GB/s for
// CurveZMQ's XSalsa20-Poly1305), by the thread that sends it, and opened in
// place by the receiving rank's receive thread, so ZeroMQ's one I/O thread
// carries bytes and nothing more.
//
// Keys. Each rank's transport has a session id: 32 random bytes made when it
// starts (a restarted process makes a new one). The key of the link from rank
// S to rank R is a keyed BLAKE2b, under the cluster's secret, of both ranks
// and both session ids, so
//  - only holders of the cluster key can seal or open (clients hold a client
//    key that yields none of this: comm/client_key.h);
//  - a key is never used by two incarnations of either end: a nonce (the
//    link's message counter) is never reused under a key, even across
//    restarts, and nothing recorded from an earlier incarnation of either
//    end opens under the current key;
//  - each message's counter must be above the last one opened on its link,
//    so a message replayed within an incarnation is refused.
// Session ids are not secret, but they must reach the other ranks
// authentically: agents carry them over the CurveZMQ control plane (the Join
// and the master's answers), `rill launch` over its CurveZMQ rendezvous.
//
// Thread-safety: a Sealer or an Opener is used by one thread at a time (the
// transport holds the link's send lock, or is the receive thread).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "comm/cluster_key.h"

namespace rill::comm {

using SessionId = std::array<uint8_t, 32>;
// 32 bytes from the operating system's random source.
SessionId new_session_id();

inline constexpr size_t kSealTagBytes = 16;
struct GcmHandle;  // a keyed AES-256-GCM context (data_cipher.cc)

// The key of the link from rank `from` to rank `to`.
std::array<uint8_t, 32> link_key(const ClusterKey& key, int from, int to, const SessionId& from_session,
                                 const SessionId& to_session);

// Seals the messages of one link, numbering them 1, 2, ...
class Sealer {
 public:
  explicit Sealer(const std::array<uint8_t, 32>& key);
  ~Sealer();
  Sealer(const Sealer&) = delete;
  Sealer& operator=(const Sealer&) = delete;

  // The counter the next message must be sealed with.
  uint64_t next_counter() const { return last_ + 1; }
  // Encrypts `a` into `a_out` and `b` into `b_out` (each as long as its
  // input; in place is allowed) as one stream, message `counter`
  // (next_counter()), authenticated with `clear` (sent in the clear: it
  // should hold the counter), and writes its tag. False if the cipher fails
  // or the counter is not the next (nothing to send).
  bool seal(uint64_t counter, std::span<const std::byte> clear, std::span<const std::byte> a, std::byte* a_out,
            std::span<const std::byte> b, std::byte* b_out, uint8_t tag[kSealTagBytes]);

 private:
  std::unique_ptr<GcmHandle> gcm_;
  uint64_t last_ = 0;
};

// Opens the messages of one link in place.
class Opener {
 public:
  explicit Opener(const std::array<uint8_t, 32>& key);
  ~Opener();
  Opener(const Opener&) = delete;
  Opener& operator=(const Opener&) = delete;

  // Decrypts `a` and `b` in place and checks the tag against `clear`;
  // false (and the bytes are not to be used) if the message was not sealed
  // with this link's key as `counter`, or `counter` is not above the last
  // one opened.
  bool open(std::span<const std::byte> clear, uint64_t counter, std::span<std::byte> a, std::span<std::byte> b,
            const uint8_t tag[kSealTagBytes]);

 private:
  std::unique_ptr<GcmHandle> gcm_;
  uint64_t last_ = 0;
};

}  // namespace rill::comm
