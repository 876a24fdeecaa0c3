#include "kernels/data/token_file.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "kernels/data/dataset_spec.h"
#include "kernels/data/file_bytes.h"

namespace rill {

namespace {
constexpr size_t kHeaderInts = 256;
}

Status write_token_file(const std::string& path, std::span<const int32_t> ids) {
  bool wide = false;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0) return invalid_argument("{}: token {} at position {} is negative", path, ids[i], i);
    wide = wide || ids[i] > 65535;
  }
  if (ids.size() > static_cast<size_t>(INT32_MAX))
    return invalid_argument("{}: {} tokens; a token file holds at most 2^31 - 1", path, ids.size());
  std::vector<int32_t> header(kHeaderInts, 0);
  header[0] = kTokenFileMagic;
  header[1] = wide ? 2 : 1;
  header[2] = static_cast<int32_t>(ids.size());
  std::vector<char> body(ids.size() * (wide ? 4 : 2));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (wide) {
      const auto v = static_cast<uint32_t>(ids[i]);
      std::memcpy(body.data() + i * 4, &v, 4);
    } else {
      const auto v = static_cast<uint16_t>(ids[i]);
      std::memcpy(body.data() + i * 2, &v, 2);
    }
  }
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size() * 4));
    out.write(body.data(), static_cast<std::streamsize>(body.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(partial, ignored);
      return Status(Code::kUnavailable, fmt::format("cannot write '{}'", path));
    }
  }
  std::error_code error;
  std::filesystem::rename(partial, path, error);
  if (error) {
    std::filesystem::remove(partial, error);
    return Status(Code::kUnavailable, fmt::format("cannot write '{}': {}", path, error.message()));
  }
  return {};
}

StatusOr<std::vector<int32_t>> parse_token_file(std::span<const uint8_t> bytes, const std::string& where) {
  if (bytes.size() < kHeaderInts * 4)
    return invalid_argument("{}: {} bytes, shorter than the 1024-byte header", where, bytes.size());
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof header);
  if (header[0] != kTokenFileMagic)
    return invalid_argument("{}: magic {} is not llm.c's {} (is it a token file?)", where, header[0], kTokenFileMagic);
  if (header[1] != 1 && header[1] != 2)
    return invalid_argument("{}: version {} (expected 1, uint16 ids, or 2, uint32)", where, header[1]);
  const size_t width = header[1] == 1 ? 2 : 4, body = bytes.size() - kHeaderInts * 4;
  if (header[2] < 0 || body % width != 0 || body / width != static_cast<size_t>(header[2]))
    return invalid_argument("{}: the header says {} tokens but {} bytes of {}-byte ids follow", where, header[2], body,
                            width);
  std::vector<int32_t> ids(static_cast<size_t>(header[2]));
  const uint8_t* p = bytes.data() + kHeaderInts * 4;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (width == 2) {
      uint16_t v;
      std::memcpy(&v, p + i * 2, 2);
      ids[i] = v;
    } else {
      uint32_t v;
      std::memcpy(&v, p + i * 4, 4);
      if (v > static_cast<uint32_t>(INT32_MAX))
        return invalid_argument("{}: token {} at position {} is above 2^31 - 1", where, v, i);
      ids[i] = static_cast<int32_t>(v);
    }
  }
  return ids;
}

StatusOr<std::vector<int32_t>> read_token_file(const std::string& path) {
  auto bytes = read_file_bytes(path);
  if (!bytes.ok()) return bytes.status();
  return parse_token_file(*bytes, fmt::format("token file '{}'", path));
}

}  // namespace rill
