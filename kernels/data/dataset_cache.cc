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
    ::close(*fd);
    if (!S_ISREG(st.st_mode)) return std::nullopt;
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

class KeptDatasets {
 public:
  StatusOr<std::shared_ptr<const Dataset>> open(const DatasetSpec& spec, const FileAccess& access,
                                                const DatasetReader& read) {
    std::optional<std::vector<Stamp>> now = stamps(spec, access);
    if (!now) return read();
    {
      MutexLock lock(mu_);
      for (;;) {
        if (std::shared_ptr<const Dataset> found = find(spec, access, *now)) return found;
        // One reader per spec: a later one waits, then finds what it kept.
        if (std::none_of(reading_.begin(), reading_.end(), [&](const DatasetSpec& s) { return s == spec; })) break;
        done_.wait(mu_);
      }
      reading_.push_back(spec);
    }
    StatusOr<std::shared_ptr<const Dataset>> made = read();
    MutexLock lock(mu_);
    reading_.erase(std::find(reading_.begin(), reading_.end(), spec));
    done_.notify_all();
    // Kept only if no file changed while it was read (or was swapped for
    // another: its inode would differ).
    if (made.ok() && stamps(spec, access) == now) keep(spec, access, std::move(*now), *made);
    return made;
  }

  int64_t hits() {
    MutexLock lock(mu_);
    return hits_;
  }

 private:
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

  void keep(const DatasetSpec& spec, const FileAccess& access, std::vector<Stamp> now,
            const std::shared_ptr<const Dataset>& dataset) REQUIRES(mu_) {
    std::erase_if(kept_, [&](const Kept& k) { return k.spec == spec && same_rules(k.access, access); });
    kept_.push_back({spec, access, std::move(now), dataset, ++clock_});
    // Within kKeptBytes, the most recent first. Letting go of one a reader
    // still holds costs a later read, not memory.
    std::sort(kept_.begin(), kept_.end(), [](const Kept& a, const Kept& b) { return a.used > b.used; });
    size_t bytes = 0;
    std::erase_if(kept_, [&](const Kept& k) {
      bytes += k.dataset->bytes();
      return bytes > kKeptBytes;
    });
  }

  Mutex mu_;
  CondVar done_;
  std::vector<Kept> kept_ GUARDED_BY(mu_);
  std::vector<DatasetSpec> reading_ GUARDED_BY(mu_);
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
