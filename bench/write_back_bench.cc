// write_back_bench: how a checkpoint file reaches the disk. Side by side, in
// alternating runs: the file written whole, then fsynced (as checkpoints
// were), against checkpoint_io::write_file_synced (chunks of 256 KiB told
// to an observer, written back by windows of 1 MiB as it grows, then
// fsynced). Prints each run and the medians with their spread.
//
//   write_back_bench [--dir /tmp] [--mb 256] [--runs 5]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/checkpoint/checkpoint_io.h"

namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// As checkpoints were written before windows: one write, one fsync.
bool write_whole(const std::string& path, const std::vector<char>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const char* p = bytes.data();
  size_t left = bytes.size();
  bool ok = true;
  while (ok && left > 0) {
    const ssize_t n = ::write(fd, p, left);
    ok = n > 0;
    if (ok) p += n, left -= static_cast<size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  return ::close(fd) == 0 && ok;
}

std::string summary(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return fmt::format("median {:.1f} ms (min {:.1f}, max {:.1f})", ms[ms.size() / 2], ms.front(), ms.back());
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp";
  long mb = 256, runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--dir") dir = argv[i + 1];
    else if (flag == "--mb") mb = std::strtol(argv[i + 1], nullptr, 10);
    else if (flag == "--runs") runs = std::strtol(argv[i + 1], nullptr, 10);
    else {
      fmt::print(stderr, "write_back_bench: unknown flag {}\n", flag);
      return 2;
    }
  }
  if (mb < 1 || runs < 1) {
    fmt::print(stderr, "write_back_bench: --mb and --runs must be at least 1\n");
    return 2;
  }
  const std::vector<char> bytes(static_cast<size_t>(mb) << 20, 7);
  const std::string path = fmt::format("{}/write-back-bench-{}", dir, ::getpid());
  std::vector<double> whole, windows;
  for (long r = 0; r < runs; ++r) {
    int64_t told = 0;
    // Alternating which goes first, so neither always follows the other's writes.
    for (int k = 0; k < 2; ++k) {
      const bool whole_now = (k == 0) == (r % 2 == 0);
      const double start = seconds_now();
      rill::Status written;
      if (whole_now) {
        if (!write_whole(path, bytes)) written = rill::Status(rill::Code::kUnavailable, "cannot write " + path);
      } else {
        written = rill::checkpoint_io::write_file_synced(path, {{bytes.data(), bytes.size()}},
                                                         [&](uint64_t, uint64_t) { ++told; });
      }
      (whole_now ? whole : windows).push_back(1e3 * (seconds_now() - start));
      ::unlink(path.c_str());
      if (!written.ok()) {
        fmt::print(stderr, "write_back_bench: {}\n", written.to_string());
        return 1;
      }
    }
    fmt::print("run {}: whole + fsync {:.1f} ms, chunks + windows {:.1f} ms ({} chunks told)\n", r + 1, whole.back(),
               windows.back(), told);
  }
  fmt::print("{} MB in {}: whole + fsync {}; chunks + windows {}\n", mb, dir, summary(whole), summary(windows));
  return 0;
}
