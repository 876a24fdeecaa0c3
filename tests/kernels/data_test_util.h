// Helpers shared by the dataset tests: a self-cleaning temp dir, file writers
// (plain and gzip), and shortcuts for reading fields and errors back.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/data/dataset.h"

namespace rill::data_test {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() / fmt::format("rill_data_test_{}_{}", ::getpid(), counter++);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

using Bytes = std::vector<uint8_t>;

inline void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
inline void write_text(const std::string& path, const std::string& text) {
  write_file(path, Bytes(text.begin(), text.end()));
}

inline void write_gzip(const std::string& path, const Bytes& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb");
  REQUIRE(gz != nullptr);
  REQUIRE(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(gz) == Z_OK);
}

inline Bytes read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void put_be32(Bytes* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<uint8_t>(v >> shift));
}

template <typename T>
inline std::vector<T> gather_all(const Dataset& dataset, const std::string& field) {
  StatusOr<int> index = dataset.field_index(field);
  REQUIRE(index.ok());
  std::vector<int64_t> all(static_cast<size_t>(dataset.num_samples()));
  std::iota(all.begin(), all.end(), int64_t{0});
  std::vector<T> out(all.size() * static_cast<size_t>(num_elements(dataset.field_meta(*index).shape)));
  dataset.gather(*index, all, out.data());
  return out;
}

// The error `spec` gives; fails the test if it loads.
inline Status open_error(const DatasetSpec& spec) {
  StatusOr<std::shared_ptr<const Dataset>> dataset = Dataset::open(spec);
  REQUIRE_FALSE(dataset.ok());
  return dataset.status();
}

inline bool contains(const Status& status, const std::string& text) {
  INFO(status.to_string());
  return status.message().find(text) != std::string::npos;
}

}  // namespace rill::data_test
