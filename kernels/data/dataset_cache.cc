#include "kernels/data/dataset_cache.h"

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"

namespace rill {
namespace {

// What a file was when it was read.
struct Stamp {
  dev_t device = 0;
  ino_t inode = 0;
  off_t size = 0;
  int64_t modified_ns = 0, changed_ns = 0;
  bool operator==(const Stamp&) const = default;
};

int64_t ns(const timespec& t) { return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec; }

std::vector<std::string> files_of(const DatasetSpec& spec) {
  if (spec.kind == "idx") return {spec.images, spec.labels};
  if (spec.kind == "csv" || spec.kind == "text" || spec.kind == "tokens") return {spec.path};
  return {};
}

// A file changed within this long before it was stamped may change again
// within the file system's clock's step and keep its times: it is read each
// time (git's "racily clean" files).
constexpr int64_t kSettledNs = 1'000'000'000;

// The files' stamps, each opened as its reader would open it; nullopt when
// the dataset is not to be kept (no files, a pipe, a file changed just now)
// or a file cannot be opened (the reader then says why). A FIFO is refused
// from its bare reference, never opened here: opening and closing its read
// end could meet its writer, whose next write would then fail.
std::optional<std::vector<Stamp>> stamps(const DatasetSpec& spec, const FileAccess& access) {
  const std::vector<std::string> files = files_of(spec);
  if (files.empty()) return std::nullopt;
  timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  std::vector<Stamp> out;
  for (const std::string& file : files) {
    struct stat st {};
    StatusOr<int> fd = file.empty() ? StatusOr<int>(invalid_argument("no file"))
                                    : open_checked(file, access, "file", /*fifos=*/false, &st);
    if (!fd.ok()) return std::nullopt;
    // The open descriptor's attributes (a network file system's cached ones
    // for a bare reference may be old).
    const bool described = ::fstat(*fd, &st) == 0;
    ::close(*fd);
    if (!described || !S_ISREG(st.st_mode)) return std::nullopt;
    if (ns(now) - std::max(ns(st.st_mtim), ns(st.st_ctim)) < kSettledNs) return std::nullopt;
    out.push_back({st.st_dev, st.st_ino, st.st_size, ns(st.st_mtim), ns(st.st_ctim)});
  }
  return out;
}

bool same_rules(const FileAccess& a, const FileAccess& b) {
  return a.restricted == b.restricted && a.roots == b.roots;
}

struct Kept {
  DatasetSpec spec;
  FileAccess access;  // the rules it was read under: given only under the same
  std::vector<Stamp> stamps;
  std::shared_ptr<const Dataset> dataset;
  uint64_t used = 0;  // the cache's clock when last given
};

// Files larger than this together are read and not kept.
size_t file_bytes(const std::vector<Stamp>& stamps) {
  size_t total = 0;
  for (const Stamp& s : stamps) total += static_cast<size_t>(s.size);
  return total;
}

class KeptDatasets {
 public:
  StatusOr<std::shared_ptr<const Dataset>> open(const DatasetSpec& spec, const FileAccess& access,
                                                const DatasetReader& read) {
    std::optional<std::vector<Stamp>> before = stamps(spec, access);
    // Not to be kept: no files, a pipe, a file just changed, or files that
    // already take more than the budget.
    if (!before || file_bytes(*before) > kKeptBytes) return read();
    std::shared_ptr<Reading> mine;
    {
      MutexLock lock(mu_);
      if (std::shared_ptr<const Dataset> found = find(spec, access, *before)) return found;
      // One read per spec and rules at once: a later reader waits for the
      // first's result, kept or not, failed or not.
      for (const std::shared_ptr<Reading>& r : reading_) {
        if (!(r->spec == spec) || !same_rules(r->access, access) || r->stamps != *before) continue;
        const std::shared_ptr<Reading> theirs = r;
        while (!theirs->done) done_.wait(mu_);
        if (theirs->result.ok()) ++hits_;
        return theirs->result;
      }
      mine = std::make_shared<Reading>(Reading{spec, access, *before});
      mine->result = internal_error("dataset '{}': the read another reader began failed with an exception", spec.name);
      reading_.push_back(mine);
    }
    // Whatever the read does (an exception included), the waiting readers
    // are answered and the reading is let go, under the lock that keeps
    // what was read: a reader coming after finds one or the other, never
    // neither (it would read again).
    struct Finish {
      KeptDatasets* self;
      const std::shared_ptr<Reading>& mine;
      bool keep = false;  // the read is to be kept: no file changed while it was read
      ~Finish() {
        MutexLock lock(self->mu_);
        if (keep) self->keep(mine->spec, mine->access, mine->stamps, *mine->result);
        mine->done = true;
        std::erase(self->reading_, mine);
        self->done_.notify_all();
      }
    };
    Finish finish{this, mine};
    mine->result = read();  // the waiters read it only once `done` is set, under the lock
    // Kept only if no file changed (or was swapped for another: its inode
    // would differ) while it was read. Stamped before the lock is taken: a
    // slow file system holds no other opener.
    finish.keep = mine->result.ok() && stamps(spec, access) == before;
    return mine->result;
  }

  int64_t hits() {
    MutexLock lock(mu_);
    return hits_;
  }

 private:
  struct Reading {
    DatasetSpec spec;
    FileAccess access;
    std::vector<Stamp> stamps;
    bool done = false;  // under mu_
    StatusOr<std::shared_ptr<const Dataset>> result = internal_error("not read yet");  // set before it is shared
  };

  std::shared_ptr<const Dataset> find(const DatasetSpec& spec, const FileAccess& access, const std::vector<Stamp>& now)
      REQUIRES(mu_) {
    for (Kept& k : kept_) {
      if (!(k.spec == spec) || !same_rules(k.access, access)) continue;
      if (k.stamps != now) return nullptr;  // changed since: read again, replacing it
      k.used = ++clock_;
      ++hits_;
      return k.dataset;
    }
    return nullptr;
  }

  void keep(const DatasetSpec& spec, const FileAccess& access, const std::vector<Stamp>& now,
            const std::shared_ptr<const Dataset>& dataset) REQUIRES(mu_) {
    std::erase_if(kept_, [&](const Kept& k) { return k.spec == spec && same_rules(k.access, access); });
    const size_t bytes = dataset->bytes();
    if (bytes > kKeptBytes) return;  // never kept: it would push out everything else
    // Within kKeptBytes, the least recently given go first. Letting go of
    // one a reader still holds costs a later read, not memory.
    std::sort(kept_.begin(), kept_.end(), [](const Kept& a, const Kept& b) { return a.used > b.used; });
    size_t total = bytes;
    std::erase_if(kept_, [&](const Kept& k) {
      if (total + k.dataset->bytes() > kKeptBytes) return true;
      total += k.dataset->bytes();
      return false;
    });
    kept_.push_back({spec, access, now, dataset, ++clock_});
  }

  Mutex mu_;
  CondVar done_;
  std::vector<Kept> kept_ GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Reading>> reading_ GUARDED_BY(mu_);
  uint64_t clock_ GUARDED_BY(mu_) = 0;
  int64_t hits_ GUARDED_BY(mu_) = 0;
};

KeptDatasets& kept() {
  static KeptDatasets* datasets = new KeptDatasets();  // never destroyed: readers may run at exit
  return *datasets;
}

}  // namespace

StatusOr<std::shared_ptr<const Dataset>> open_kept(const DatasetSpec& spec, const FileAccess& access,
                                                   const DatasetReader& read) {
  return kept().open(spec, access, read);
}

int64_t kept_dataset_hits() { return kept().hits(); }

}  // namespace rill
