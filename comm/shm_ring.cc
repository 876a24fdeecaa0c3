#include "comm/shm_ring.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <string_view>

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

ShmRing::Write ShmRing::try_write(const RecordHeader& header, std::span<const std::byte> first,
                                  std::span<const std::byte> second) {
  const uint64_t need = align_up(sizeof(RecordHeader) + first.size() + second.size(), kRecordAlign);
  uint64_t head = c_->head.load(std::memory_order_relaxed);
  const uint64_t tail = c_->tail.load(std::memory_order_acquire);
  // Both positions lie in the shared mapping. An aligned head masked into
  // the ring leaves at least a wrap marker's 32 bytes before its end, and
  // the room check keeps every byte written below: ahead of the tail by at
  // most the capacity, so inside the ring.
  if (head % kRecordAlign != 0 || head - tail > capacity_) return Write::kCorrupt;
  uint64_t pos = head & (capacity_ - 1);
  const uint64_t skip = capacity_ - pos < need ? capacity_ - pos : 0;  // the rest of the ring, when it is too short
  if (head + skip + need - tail > capacity_) return Write::kFull;
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
  return Write::kWritten;
}

ShmRing::Peek ShmRing::peek(RecordHeader* header, std::span<const std::byte>* bytes) {
  uint64_t tail = c_->tail.load(std::memory_order_relaxed);
  const uint64_t head = c_->head.load(std::memory_order_acquire);
  // Each pass moves the tail on by at least a record's 32 bytes towards the
  // head, which is read once: at most capacity / 32 passes.
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
    // pop() moves past what was checked here, not what the record's header
    // says by then.
    next_tail_ = tail + align_up(sizeof *header + header->bytes, kRecordAlign);
    return Peek::kRecord;
  }
  return Peek::kEmpty;
}

void ShmRing::pop() { c_->tail.store(next_tail_, std::memory_order_release); }

bool ShmRing::empty() const {
  return c_->head.load(std::memory_order_acquire) == c_->tail.load(std::memory_order_relaxed);
}

std::atomic<uint32_t>& ShmRing::sleepers() { return c_->sleepers; }

bool ShmRing::over_half() const {
  return c_->head.load(std::memory_order_relaxed) - c_->tail.load(std::memory_order_relaxed) > capacity_ / 2;
}

ShmInbox::ShmInbox(std::string name, bool owner, void* base, size_t bytes, int slots, size_t ring_bytes,
                   int owner_pid)
    : name_(std::move(name)),
      owner_(owner),
      base_(base),
      bytes_(bytes),
      slots_(slots),
      ring_bytes_(ring_bytes),
      owner_pid_(owner_pid) {}

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
  // Exclusive: a name made a moment ago from 128 random bits is nobody's,
  // and one that exists anyway is never taken over or trusted.
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST)
      return Status(Code::kFailedPrecondition,
                    fmt::format("shared memory '{}' exists already: another process holds the name", name));
    return Status(Code::kUnavailable, fmt::format("shared memory '{}': {}", name, std::strerror(errno)));
  }
  auto fail = [&](const std::string& what) {
    const int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    return Status(Code::kUnavailable, fmt::format("shared memory '{}' ({} bytes): {}: {}", name, total, what,
                                                  std::strerror(e)));
  };
  // The mode given to shm_open is cut by the umask: set it exactly, before
  // the size, so a peer that sees the size sees the mode too.
  if (fchmod(fd, 0600) != 0) return fail("setting mode 0600");
  // Sized with its pages reserved, not by ftruncate: on a /dev/shm too
  // small for it ftruncate succeeds, and the first write here (or a peer's
  // first read) dies of SIGBUS. posix_fallocate fails instead, and the rank
  // talks TCP; and the size appears only once every page is there, so a
  // peer sees size 0 ("not ready yet") until then.
  if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(total)); e != 0) {
    errno = e;
    return fail("reserving its pages (is /dev/shm full?)");
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return fail("mapping");
  close(fd);
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
  return std::unique_ptr<ShmInbox>(new ShmInbox(name, true, base, total, slots, ring_bytes, getpid()));
}

StatusOr<std::unique_ptr<ShmInbox>> ShmInbox::open(const std::string& name, int slots) {
  auto refuse = [&](const std::string& why) {
    return Status(Code::kPermissionDenied, fmt::format("shared memory '{}' {}", name, why));
  };
  if (slots < 1) return invalid_argument("shared memory '{}': an inbox of {} rings", name, slots);
  const int fd = shm_open(name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) {
    if (errno == ENOENT) return Status(Code::kNotFound, fmt::format("shared memory '{}' does not exist yet", name));
    return refuse(fmt::format("cannot be opened: {}", std::strerror(errno)));  // another user's (EACCES), a link (ELOOP)
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return refuse(fmt::format("cannot be examined: {}", std::strerror(e)));
  }
  // Only what this user made: nobody else can write into it, or read what
  // is written. Nothing of the segment is read before these checks.
  std::string wrong;
  uint64_t ring_bytes = 0;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (st.st_uid != geteuid()) {
    wrong = fmt::format("is owned by uid {}, not by this process's {}", st.st_uid, geteuid());
  } else if (!S_ISREG(st.st_mode)) {
    wrong = "is not a shared-memory object";
  } else if (size == 0) {
    close(fd);  // its creator has not sized it yet
    return Status(Code::kNotFound, fmt::format("shared memory '{}' is not ready yet", name));
  } else if ((st.st_mode & 07777) != 0600) {
    wrong = fmt::format("has mode {:04o}, not 0600", st.st_mode & 07777);
  } else {
    const uint64_t per_ring = size > kHeaderBytes ? (size - kHeaderBytes) / static_cast<uint64_t>(slots) : 0;
    ring_bytes = per_ring > kControlBytes ? per_ring - kControlBytes : 0;
    if (ring_bytes < (64u << 10) || (ring_bytes & (ring_bytes - 1)) != 0 ||
        kHeaderBytes + static_cast<uint64_t>(slots) * (kControlBytes + ring_bytes) != size)
      wrong = fmt::format("has {} bytes: not an inbox of {} ring(s)", size, slots);
  }
  if (!wrong.empty()) {
    close(fd);
    return refuse(wrong);
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mapped_errno = errno;
  close(fd);
  if (base == MAP_FAILED) return refuse(fmt::format("cannot be mapped: {}", std::strerror(mapped_errno)));
  // Read once, here; the sizes kept are the ones derived from the object's
  // size above, which its header must repeat.
  auto* h = static_cast<Header*>(base);
  if (h->magic.load(std::memory_order_acquire) != kMagic) {
    munmap(base, size);
    return Status(Code::kNotFound, fmt::format("shared memory '{}' is not ready yet", name));
  }
  const int32_t pid = h->pid;
  if (h->ring_bytes != ring_bytes || h->total_bytes != size || h->slots != slots || pid <= 0) {
    munmap(base, size);
    return refuse("holds a header that does not match its size");
  }
  return std::unique_ptr<ShmInbox>(new ShmInbox(name, false, base, size, slots, ring_bytes, pid));
}

std::vector<std::string> ShmInbox::remove_stale(const std::string& prefix, std::chrono::seconds min_age) {
  std::vector<std::string> removed;
  // Names are "/<entry of /dev/shm>", one level.
  if (prefix.size() < 2 || prefix[0] != '/' || prefix.find('/', 1) != std::string::npos) return removed;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return removed;
  const std::string_view entry_prefix = std::string_view(prefix).substr(1);
  const time_t now = time(nullptr);
  // Another user may make entries of any kind and number under the prefix:
  // each is looked at without opening it first (an open of a FIFO, or of a
  // file under a lease, would wait), and the scan is bounded in entries.
  auto inbox_like = [&](const struct stat& st) {
    return S_ISREG(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 07777) == 0600 &&
           static_cast<uint64_t>(st.st_size) > kHeaderBytes && now - st.st_mtime >= min_age.count();
  };
  constexpr int kMostLooked = 4096;
  int looked = 0;
  while (const dirent* entry = readdir(dir)) {
    if (!std::string_view(entry->d_name).starts_with(entry_prefix)) continue;
    if (++looked > kMostLooked) break;
    struct stat named {}, opened {};
    if (fstatat(dirfd(dir), entry->d_name, &named, AT_SYMLINK_NOFOLLOW) != 0 || !inbox_like(named)) continue;
    // Only this user's regular objects get here, which nobody else can
    // make, replace or truncate: opened without waiting, and the same one.
    const int fd = openat(dirfd(dir), entry->d_name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    int32_t pid = 0;
    if (fstat(fd, &opened) == 0 && opened.st_dev == named.st_dev && opened.st_ino == named.st_ino &&
        inbox_like(opened)) {
      void* base = mmap(nullptr, kHeaderBytes, PROT_READ, MAP_SHARED, fd, 0);
      if (base != MAP_FAILED) {
        const auto* h = static_cast<const Header*>(base);
        if (h->magic.load(std::memory_order_acquire) == kMagic &&
            h->total_bytes == static_cast<uint64_t>(opened.st_size))
          pid = h->pid;
        munmap(base, kHeaderBytes);
      }
    }
    close(fd);
    // A pid still in use (its creator, or a process given its number since)
    // keeps the inbox.
    const std::string name = std::string("/") + entry->d_name;
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH && shm_unlink(name.c_str()) == 0) removed.push_back(name);
  }
  closedir(dir);
  return removed;
}

void ShmInbox::prefault(int slot) {
  auto* data = static_cast<std::byte*>(base_) + kHeaderBytes +
               static_cast<uint64_t>(slot) * (kControlBytes + ring_bytes_) + kControlBytes;
  // This producer's own ring, unused yet: writing maps its pages for writing.
  std::memset(data, 0, ring_bytes_);
  header()->attached.fetch_add(1, std::memory_order_acq_rel);
}

bool ShmInbox::all_attached() const {
  return header()->attached.load(std::memory_order_acquire) >= static_cast<uint32_t>(slots_);
}

void ShmInbox::remove_name() {
  if (!owner_ || !named_) return;
  shm_unlink(name_.c_str());
  named_ = false;
}
bool ShmInbox::owner_closed() const { return header()->closed.load(std::memory_order_acquire) != 0; }
void ShmInbox::mark_closed() { header()->closed.store(1, std::memory_order_release); }

ShmRing ShmInbox::ring(int slot) {
  auto* at = static_cast<std::byte*>(base_) + kHeaderBytes + static_cast<uint64_t>(slot) * (kControlBytes + ring_bytes_);
  return ShmRing(reinterpret_cast<ShmRing::Control*>(at), at + kControlBytes, ring_bytes_);
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
