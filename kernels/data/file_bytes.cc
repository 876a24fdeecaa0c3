#include "kernels/data/file_bytes.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace rill {
namespace {

bool has_gzip_magic(std::span<const uint8_t> bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

// Closes a POSIX file descriptor on every return path.
class FileCloser {
 public:
  explicit FileCloser(int fd) : fd_(fd) {}
  ~FileCloser() { ::close(fd_); }
  FileCloser(const FileCloser&) = delete;
  FileCloser& operator=(const FileCloser&) = delete;

 private:
  int fd_;
};

// First guess at the inflated size: a gzip member ends with its input size
// mod 2^32. Capped by deflate's best ratio (about 1032:1) so a corrupt trailer
// cannot make us reserve absurd amounts; the buffer grows when the guess is low.
size_t inflated_size_hint(std::span<const uint8_t> compressed) {
  size_t hint = 64 * 1024;
  if (compressed.size() >= 18) {
    const uint8_t* t = compressed.data() + compressed.size() - 4;
    size_t isize = t[0] | (t[1] << 8) | (t[2] << 16) | (static_cast<size_t>(t[3]) << 24);
    hint = std::max(hint, std::min(isize, compressed.size() * 1032));
  }
  return hint;
}

}  // namespace

StatusOr<std::vector<uint8_t>> gunzip_bytes(std::span<const uint8_t> compressed, const std::string& path) {
  std::vector<uint8_t> out(inflated_size_hint(compressed));
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header and trailer (checked by zlib, CRC included).
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return internal_error("'{}': inflateInit2 failed", path);
  size_t in_pos = 0, out_pos = 0;
  constexpr size_t kMaxChunk = std::numeric_limits<uInt>::max();  // avail_* are 32-bit
  Status status;
  while (true) {
    if (out_pos == out.size()) out.resize(out.size() * 2);
    zs.next_in = const_cast<Bytef*>(compressed.data() + in_pos);
    zs.avail_in = static_cast<uInt>(std::min(compressed.size() - in_pos, kMaxChunk));
    zs.next_out = out.data() + out_pos;
    zs.avail_out = static_cast<uInt>(std::min(out.size() - out_pos, kMaxChunk));
    const uInt avail_in_before = zs.avail_in, avail_out_before = zs.avail_out;
    int ret = inflate(&zs, Z_NO_FLUSH);
    in_pos += avail_in_before - zs.avail_in;
    out_pos += avail_out_before - zs.avail_out;
    if (ret == Z_STREAM_END) {
      // Concatenated members form one stream (as gzip -d reads them); bytes
      // after the last member that are not another member are ignored, as gzip does.
      if (has_gzip_magic(compressed.subspan(in_pos))) {
        inflateReset(&zs);
        continue;
      }
      break;
    }
    if (ret == Z_OK) continue;
    if (ret == Z_BUF_ERROR && zs.avail_out == 0) continue;  // grow the output and go on
    if (ret == Z_BUF_ERROR && in_pos == compressed.size()) {
      status = data_loss("'{}': truncated gzip stream: the compressed data ends after {} bytes "
                         "({} bytes inflated) before the end of the stream",
                         path, compressed.size(), out_pos);
    } else {
      status = data_loss("'{}': corrupt gzip stream at compressed byte {}: {}", path, in_pos,
                         zs.msg != nullptr ? zs.msg : zError(ret));
    }
    break;
  }
  inflateEnd(&zs);
  if (!status.ok()) return status;
  out.resize(out_pos);
  return out;
}

namespace {

// A pipe or FIFO, read to its end. Opened without blocking: a FIFO's reader
// sees no end before a writer has come and gone (Linux), so poll waits for
// the writer's first bytes; a writer that is silent for `idle_seconds` is
// an error, so a FIFO nobody writes cannot hold a node forever.
StatusOr<std::vector<uint8_t>> read_pipe(int fd, const std::string& path, int idle_seconds) {
  std::vector<uint8_t> bytes;
  size_t done = 0;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, idle_seconds * 1000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return Status(Code::kUnavailable, fmt::format("'{}': poll failed: {}", path, std::strerror(errno)));
    if (ready == 0)
      return Status(Code::kDeadlineExceeded,
                    fmt::format("'{}': a pipe that gave no bytes for {} s ({} read so far): is its writer running?",
                                path, idle_seconds, done));
    for (;;) {
      if (bytes.size() - done < 65536) bytes.resize(std::max<size_t>(2 * bytes.size(), done + 65536));
      ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n == 0) {  // every writer closed: the end
        bytes.resize(done);
        return bytes;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;  // the writer is still there: wait for more
      return Status(Code::kUnavailable, fmt::format("'{}': read failed: {}", path, std::strerror(errno)));
    }
  }
}

}  // namespace

StatusOr<std::vector<uint8_t>> read_file_bytes(const std::string& path, const ReadOptions& options) {
  if (path.empty()) return invalid_argument("no file name given");
  // Checked before anything is opened for reading (base/file_access.h);
  // a FIFO is opened without waiting for a writer (read_pipe waits, bounded).
  static const FileAccess kAnywhere;
  struct stat st {};
  RILL_ASSIGN_OR_RETURN(const int fd,
                        open_checked(path, options.access ? *options.access : kAnywhere, "file", options.pipes, &st));
  FileCloser closer(fd);
  if (S_ISFIFO(st.st_mode)) {
    RILL_ASSIGN_OR_RETURN(std::vector<uint8_t> piped, read_pipe(fd, path, options.pipe_idle_seconds));
    if (has_gzip_magic(piped)) return gunzip_bytes(piped, path);
    return piped;
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status(Code::kUnavailable, fmt::format("'{}': read failed: {}", path, std::strerror(errno)));
    if (n == 0) break;  // the file shrank while we read it
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  if (has_gzip_magic(bytes)) return gunzip_bytes(bytes, path);
  return bytes;
}

}  // namespace rill
