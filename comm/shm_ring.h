// Shared memory between the processes of one machine: the lane through which
// a rank's local peers send to it without a thread hop (ZeroMQ hands every
// message to its I/O threads, tens of microseconds each on these machines).
//
// A rank that receives owns one segment, its inbox: a doorbell and one
// single-producer single-consumer byte ring per local peer. A message is one
// or more records (chunks) in its sender's ring, in order; a record is a
// 32-byte RecordHeader and its bytes, 8-byte aligned, never wrapping (a wrap
// marker sends the reader back to the start).
//
// Trust. An inbox is created O_EXCL with mode 0600 and opened only when it
// is this process's user's, mode 0600, a regular object of the size its
// rings need: another user can neither plant one nor open ours. Its sizes
// are copied into this process once, when it is created or opened, and
// never read from the mapping again; the positions that must stay shared
// (each ring's head and tail) are checked, and masked into the ring, on
// every use, so whatever another process writes there cannot make this one
// read or write outside its mapping.
//
// Threads and processes: one producer per ring (its sender serializes its
// threads), one consumer at a time (its receiver serializes its threads).
// Positions are atomics in the shared mapping; the doorbell is a futex word,
// shared between processes. Nothing here allocates after creation.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace rill::comm {

struct RecordHeader {
  uint32_t bytes = 0;   // of this record after the header
  uint32_t flags = 0;   // kFirst, kLast
  uint64_t tag = 0;     // the message's
  uint64_t total = 0;   // the message's bytes in all
  uint64_t offset = 0;  // of this record's bytes within the message
  static constexpr uint32_t kFirst = 1, kLast = 2;
};
static_assert(sizeof(RecordHeader) == 32);

// One direction between two processes: a view into an inbox.
class ShmRing {
 public:
  struct Control;  // in the shared mapping
  ShmRing(Control* control, std::byte* data, uint64_t capacity) : c_(control), data_(data), capacity_(capacity) {}

  // The largest record's bytes (a quarter of the ring: a message larger than
  // this is sent as several records).
  size_t max_record_bytes() const;

  // Producer. Writes one record of `first` then `second` bytes (together at
  // most max_record_bytes()); kFull (nothing written) while the ring lacks
  // the room, kCorrupt (nothing written) when its positions cannot be what
  // this producer and a consumer wrote.
  enum class Write { kWritten, kFull, kCorrupt };
  Write try_write(const RecordHeader& header, std::span<const std::byte> first, std::span<const std::byte> second);

  // Consumer. The oldest record, valid until pop(); kCorrupt when the
  // positions or a record's size cannot be what a producer wrote.
  enum class Peek { kEmpty, kRecord, kCorrupt };
  Peek peek(RecordHeader* header, std::span<const std::byte>* bytes);
  void pop();  // REQUIRES: peek() on this object gave kRecord
  bool empty() const;

  // Consumer threads blocked until a message of this ring arrives: a
  // producer rings the doorbell for them.
  std::atomic<uint32_t>& sleepers();
  // More than half of the ring is written and not yet read.
  bool over_half() const;

 private:
  Control* c_;
  std::byte* data_;
  uint64_t capacity_;
  uint64_t next_tail_ = 0;  // where pop() moves the tail: the end of the record peek() checked
};

class ShmInbox {
 public:
  // The receiving side: creates the segment `name` ("/rill-<random>"), mode
  // 0600, with `slots` rings of `ring_bytes` (a power of two, at least 64
  // KiB). kInvalidArgument for other sizes; kFailedPrecondition when the name is
  // taken (by whom is not looked at: nothing of it is opened).
  static StatusOr<std::unique_ptr<ShmInbox>> create(const std::string& name, int slots, size_t ring_bytes);
  // A sending side: maps the segment `name`, which must hold `slots` rings.
  // kNotFound while its receiver has not created it yet (or not finished);
  // kPermissionDenied, saying what is wrong (never what it holds), when it
  // is not this user's own inbox: owned by another, a mode other than 0600,
  // not a regular object, a size or header not of an inbox of `slots` rings.
  static StatusOr<std::unique_ptr<ShmInbox>> open(const std::string& name, int slots);
  // Removes the names of this user's inboxes under `prefix` ("/rill-")
  // whose creator died before removing them (killed before every peer
  // attached): a regular object of this user, mode 0600, an inbox's header
  // and size, made at least `min_age` ago (writes through the mapping do
  // not move its time), its creator's pid gone. Looks at most 4096 entries
  // under the prefix, and opens only those of this user. Returns the names
  // removed. A pid from another pid namespace sharing /dev/shm would look
  // gone: `min_age` keeps such an inbox while it is young, and peers that
  // had not attached to an older one go over TCP.
  static std::vector<std::string> remove_stale(const std::string& prefix, std::chrono::seconds min_age);
  ~ShmInbox();  // unmaps; the creator also removes the name
  ShmInbox(const ShmInbox&) = delete;
  ShmInbox& operator=(const ShmInbox&) = delete;

  int slots() const { return slots_; }
  size_t ring_bytes() const { return ring_bytes_; }
  ShmRing ring(int slot);  // REQUIRES: 0 <= slot < slots()
  // A producer, before its first record: maps the pages of its ring, and
  // counts itself attached.
  void prefault(int slot);
  // The creator: once every producer is attached the name is no longer
  // needed (the mappings stay), so it is removed then, and a process that
  // dies leaves nothing in /dev/shm. Idempotent.
  bool all_attached() const;
  void remove_name();

  // Producer, after writing to `ring`: wakes the consumer when it sleeps and
  // someone needs it to read: a thread blocked on the ring, a handler
  // (eager), or a ring more than half full. A message nobody waits for yet
  // stays in the ring until a receiver polls it (no wake-up for it).
  void ring_bell(ShmRing& ring);
  // Consumer: messages are to be read at once (a handler takes some tags).
  void set_eager(bool eager);
  bool eager() const;
  // Wakes the consumer whether or not it sleeps (closing, queued work).
  void wake();
  // Consumer: announces that it will sleep, returning the bell to wait on;
  // it must look at every ring once more before wait().
  uint32_t prepare_sleep();
  // Sleeps until the bell moves past `seen` or `timeout` passes; then no
  // longer sleeping.
  void wait(uint32_t seen, std::chrono::microseconds timeout);

  // The creating process (as it said when it created the inbox), and
  // whether it has closed its inbox: how its peers tell that it is gone.
  int owner_pid() const { return owner_pid_; }
  bool owner_closed() const;
  void mark_closed();  // by the creator

 private:
  struct Header;
  ShmInbox(std::string name, bool owner, void* base, size_t bytes, int slots, size_t ring_bytes, int owner_pid);
  Header* header() const;

  const std::string name_;
  const bool owner_;
  bool named_ = true;  // the creator has not removed the name yet
  void* const base_;
  // Copied when created or opened; never read from the mapping again.
  const size_t bytes_;
  const int slots_;
  const size_t ring_bytes_;
  const int owner_pid_;
};

}  // namespace rill::comm
