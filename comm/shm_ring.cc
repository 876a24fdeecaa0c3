#include "comm/shm_ring.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

namespace rill::comm {
namespace {

constexpr uint64_t kMagic = 0x31474e49524c4c52;  // "RLLRING1"
constexpr uint32_t kWrap = 0xffffffffu;
constexpr uint64_t kRecordAlign = 32;  // so a wrap marker always fits before the end
constexpr uint64_t kControlBytes = 256;
constexpr uint64_t kHeaderBytes = 256;

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "shared-memory rings need lock-free atomics");

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE: the word is shared with other processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

struct ShmRing::Control {
  alignas(64) std::atomic<uint64_t> head;  // bytes written; the producer's
  alignas(64) std::atomic<uint64_t> tail;  // bytes consumed; the consumer's
  alignas(64) std::atomic<uint32_t> sleepers;
};
static_assert(sizeof(ShmRing::Control) <= kControlBytes);

struct ShmInbox::Header {
  std::atomic<uint64_t> magic;  // written last by the creator
  uint64_t ring_bytes;
  uint64_t total_bytes;
  int32_t slots;
  int32_t pid;
  std::atomic<uint32_t> closed;
  std::atomic<uint32_t> attached;  // producers that have mapped it
  alignas(64) std::atomic<uint32_t> bell;      // futex word: moves when a producer wakes the consumer
  std::atomic<uint32_t> sleeping;              // the consumer sleeps (or is about to)
  std::atomic<uint32_t> eager;                 // wake the consumer for every message
};

size_t ShmRing::max_record_bytes() const { return capacity_ / 4 - sizeof(RecordHeader); }

bool ShmRing::try_write(const RecordHeader& header, std::span<const std::byte> first,
                        std::span<const std::byte> second) {
  const uint64_t need = align_up(sizeof(RecordHeader) + first.size() + second.size(), kRecordAlign);
  uint64_t head = c_->head.load(std::memory_order_relaxed);
  const uint64_t tail = c_->tail.load(std::memory_order_acquire);
  uint64_t pos = head & (capacity_ - 1);
  const uint64_t skip = capacity_ - pos < need ? capacity_ - pos : 0;  // the rest of the ring, when it is too short
  if (head + skip + need - tail > capacity_) return false;
  if (skip > 0) {
    RecordHeader wrap;
    wrap.bytes = kWrap;
    std::memcpy(data_ + pos, &wrap, sizeof wrap);
    head += skip;
    pos = 0;
  }
  std::byte* at = data_ + pos;
  RecordHeader h = header;
  h.bytes = static_cast<uint32_t>(first.size() + second.size());
  std::memcpy(at, &h, sizeof h);
  if (!first.empty()) std::memcpy(at + sizeof h, first.data(), first.size());
  if (!second.empty()) std::memcpy(at + sizeof h + first.size(), second.data(), second.size());
  c_->head.store(head + need, std::memory_order_release);
  return true;
}

ShmRing::Peek ShmRing::peek(RecordHeader* header, std::span<const std::byte>* bytes) {
  uint64_t tail = c_->tail.load(std::memory_order_relaxed);
  const uint64_t head = c_->head.load(std::memory_order_acquire);
  while (tail != head) {
    if (head - tail > capacity_ || tail % kRecordAlign != 0) return Peek::kCorrupt;
    const uint64_t pos = tail & (capacity_ - 1);
    std::memcpy(header, data_ + pos, sizeof *header);
    if (header->bytes == kWrap) {
      tail += capacity_ - pos;
      c_->tail.store(tail, std::memory_order_release);
      continue;
    }
    // The producer is another process: a record must lie inside what it wrote.
    if (header->bytes > capacity_ - pos - sizeof *header ||
        align_up(sizeof *header + header->bytes, kRecordAlign) > head - tail)
      return Peek::kCorrupt;
    *bytes = std::span<const std::byte>(data_ + pos + sizeof *header, header->bytes);
    return Peek::kRecord;
  }
  return Peek::kEmpty;
}

void ShmRing::pop() {
  const uint64_t tail = c_->tail.load(std::memory_order_relaxed);
  RecordHeader header;
  std::memcpy(&header, data_ + (tail & (capacity_ - 1)), sizeof header);
  c_->tail.store(tail + align_up(sizeof header + header.bytes, kRecordAlign), std::memory_order_release);
}

bool ShmRing::empty() const {
  return c_->head.load(std::memory_order_acquire) == c_->tail.load(std::memory_order_relaxed);
}

std::atomic<uint32_t>& ShmRing::sleepers() { return c_->sleepers; }

bool ShmRing::over_half() const {
  return c_->head.load(std::memory_order_relaxed) - c_->tail.load(std::memory_order_relaxed) > capacity_ / 2;
}

ShmInbox::ShmInbox(std::string name, bool owner, void* base, size_t bytes)
    : name_(std::move(name)), owner_(owner), base_(base), bytes_(bytes) {}

ShmInbox::~ShmInbox() {
  munmap(base_, bytes_);
  remove_name();
}

ShmInbox::Header* ShmInbox::header() const {
  static_assert(sizeof(Header) <= kHeaderBytes);
  return static_cast<Header*>(base_);
}

StatusOr<std::unique_ptr<ShmInbox>> ShmInbox::create(const std::string& name, int slots, size_t ring_bytes) {
  if (slots < 1 || ring_bytes < (64u << 10) || (ring_bytes & (ring_bytes - 1)) != 0)
    return invalid_argument("shared-memory inbox '{}': {} rings of {} bytes (a power of two, at least 64 KiB)", name,
                            slots, ring_bytes);
  const uint64_t total = kHeaderBytes + static_cast<uint64_t>(slots) * (kControlBytes + ring_bytes);
  shm_unlink(name.c_str());  // one left by a process that died; a live one cannot hold our bound port
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Status(Code::kUnavailable, fmt::format("shared memory '{}': {}", name, std::strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    const int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    return Status(Code::kUnavailable, fmt::format("shared memory '{}' ({} bytes): {}", name, total, std::strerror(e)));
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    return Status(Code::kUnavailable, fmt::format("mapping shared memory '{}': {}", name, std::strerror(errno)));
  }
  // ftruncate gave zeros: every position, sleeper count and bell starts at
  // 0. Writing them here maps every page now rather than at a message's
  // first pass through the ring (a page fault each, tens of microseconds).
  std::memset(base, 0, total);
  auto* h = static_cast<Header*>(base);
  h->ring_bytes = ring_bytes;
  h->total_bytes = total;
  h->slots = slots;
  h->pid = static_cast<int32_t>(getpid());
  h->magic.store(kMagic, std::memory_order_release);
  return std::unique_ptr<ShmInbox>(new ShmInbox(name, true, base, total));
}

StatusOr<std::unique_ptr<ShmInbox>> ShmInbox::open(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    if (errno == ENOENT) return Status(Code::kNotFound, fmt::format("shared memory '{}' does not exist yet", name));
    return Status(Code::kUnavailable, fmt::format("shared memory '{}': {}", name, std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < kHeaderBytes) {
    close(fd);
    return Status(Code::kNotFound, fmt::format("shared memory '{}' is not ready yet", name));
  }
  const auto total = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED)
    return Status(Code::kUnavailable, fmt::format("mapping shared memory '{}': {}", name, std::strerror(errno)));
  auto* h = static_cast<Header*>(base);
  if (h->magic.load(std::memory_order_acquire) != kMagic) {
    munmap(base, total);
    return Status(Code::kNotFound, fmt::format("shared memory '{}' is not ready yet", name));
  }
  if (h->total_bytes != total || h->slots < 1 || (h->ring_bytes & (h->ring_bytes - 1)) != 0 ||
      kHeaderBytes + static_cast<uint64_t>(h->slots) * (kControlBytes + h->ring_bytes) != total) {
    munmap(base, total);
    return Status(Code::kDataLoss, fmt::format("shared memory '{}' has a malformed header", name));
  }
  return std::unique_ptr<ShmInbox>(new ShmInbox(name, false, base, total));
}

int ShmInbox::slots() const { return header()->slots; }

void ShmInbox::prefault(int slot) {
  const uint64_t ring_bytes = header()->ring_bytes;
  auto* data = static_cast<std::byte*>(base_) + kHeaderBytes + static_cast<uint64_t>(slot) * (kControlBytes + ring_bytes) +
               kControlBytes;
  // This producer's own ring, unused yet: writing maps its pages for writing.
  std::memset(data, 0, ring_bytes);
  header()->attached.fetch_add(1, std::memory_order_acq_rel);
}

bool ShmInbox::all_attached() const {
  return header()->attached.load(std::memory_order_acquire) >= static_cast<uint32_t>(header()->slots);
}

void ShmInbox::remove_name() {
  if (!owner_ || !named_) return;
  shm_unlink(name_.c_str());
  named_ = false;
}
int ShmInbox::owner_pid() const { return header()->pid; }
bool ShmInbox::owner_closed() const { return header()->closed.load(std::memory_order_acquire) != 0; }
void ShmInbox::mark_closed() { header()->closed.store(1, std::memory_order_release); }

ShmRing ShmInbox::ring(int slot) {
  const uint64_t ring_bytes = header()->ring_bytes;
  auto* at = static_cast<std::byte*>(base_) + kHeaderBytes + static_cast<uint64_t>(slot) * (kControlBytes + ring_bytes);
  return ShmRing(reinterpret_cast<ShmRing::Control*>(at), at + kControlBytes, ring_bytes);
}

void ShmInbox::set_eager(bool eager) {
  header()->eager.store(eager ? 1 : 0, std::memory_order_seq_cst);
  wake();
}

bool ShmInbox::eager() const { return header()->eager.load(std::memory_order_relaxed) != 0; }

void ShmInbox::ring_bell(ShmRing& ring) {
  Header* h = header();
  // Orders the record written before against reading `sleeping` and the
  // sleepers (the consumer orders those against its last look at the rings).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h->sleeping.load(std::memory_order_relaxed) == 0) return;
  if (h->eager.load(std::memory_order_relaxed) == 0 && ring.sleepers().load(std::memory_order_relaxed) == 0 &&
      !ring.over_half())
    return;
  h->bell.fetch_add(1, std::memory_order_release);
  futex(&h->bell, FUTEX_WAKE, INT_MAX, nullptr);
}

void ShmInbox::wake() {
  Header* h = header();
  h->bell.fetch_add(1, std::memory_order_seq_cst);
  futex(&h->bell, FUTEX_WAKE, INT_MAX, nullptr);
}

uint32_t ShmInbox::prepare_sleep() {
  Header* h = header();
  h->sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return h->bell.load(std::memory_order_acquire);
}

void ShmInbox::wait(uint32_t seen, std::chrono::microseconds timeout) {
  Header* h = header();
  timespec t{static_cast<time_t>(timeout.count() / 1000000), static_cast<long>(timeout.count() % 1000000) * 1000};
  futex(&h->bell, FUTEX_WAIT, seen, &t);  // returns at once if the bell moved
  h->sleeping.store(0, std::memory_order_relaxed);
}

}  // namespace rill::comm
