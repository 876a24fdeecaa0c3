// The dataset readers (kernels/data: idx images and labels, plain or gzip;
// CSV with and without a header or label column; llm.c's token files and
// text as tokens) and the heads `rill check` peeks at: the bytes of a user's data files. The first byte picks what
// the rest is; the rest is written to a file and read as that.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "kernels/data/dataset.h"
#include "kernels/data/dataset_peek.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

// A file of this process's own, rewritten for each input.
std::string scratch(const char* name) {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("rill-fuzz-datasets-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return (dir / name).string();
}

void write(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                static_cast<std::streamsize>(size));
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

// A valid idx pair of 2 samples of 2 x 2 pixels: the fixed other half.
std::string idx_images() { return be32(0x803) + be32(2) + be32(2) + be32(2) + std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8); }
std::string idx_labels() { return be32(0x801) + be32(2) + std::string("\x01\x02", 2); }

// An llm.c token file of `count` ids of `version`'s width (1: uint16, 2: uint32).
std::string token_file(int32_t version, int32_t count) {
  std::string header(1024, '\0');
  const int32_t fields[3] = {rill::kTokenFileMagic, version, count};
  std::memcpy(header.data(), fields, sizeof fields);
  for (int32_t i = 0; i < count; ++i) {
    const uint32_t id = static_cast<uint32_t>(i * 37 % 50257);
    header.append(reinterpret_cast<const char*>(&id), version == 1 ? 2 : 4);  // little-endian, as llm.c writes
  }
  return header;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t kind = data[0] % 6;
  ++data;
  --size;
  rill::DatasetSpec spec;
  spec.name = "fuzzed";
  if (kind < 2) {  // the images file fuzzed (0) or the labels file (1)
    spec.kind = "idx";
    spec.images = scratch("images");
    spec.labels = scratch("labels");
    const std::string other = kind == 0 ? idx_labels() : idx_images();
    write(kind == 0 ? spec.images : spec.labels, data, size);
    write(kind == 0 ? spec.labels : spec.images, reinterpret_cast<const uint8_t*>(other.data()), other.size());
  } else if (kind < 4) {  // CSV: with a header and a label column (2), or neither (3)
    spec.kind = "csv";
    spec.path = scratch("rows.csv");
    spec.header = kind == 2;
    spec.label_column = kind == 2 ? 0 : -1;
    write(spec.path, data, size);
  } else {  // a token file (4) or text (5), windows of 4 tokens, part of the stream
    spec.kind = kind == 4 ? "tokens" : "text";
    spec.path = scratch(kind == 4 ? "stream.bin" : "stream.txt");
    spec.context = 4;
    spec.split_from = kind == 4 ? 0.0 : 0.5;
    spec.split_to = kind == 4 ? 0.9 : 1.0;
    write(spec.path, data, size);
  }
  auto peeked = rill::peek_dataset_fields(spec);
  auto opened = rill::Dataset::open(spec);
  // Where both read the file, the head says what the load holds.
  if (peeked.ok() && *peeked && opened.ok())
    for (const rill::PeekedField& f : **peeked) {
      auto index = (*opened)->field_index(f.name);
      if (index.ok() && !((*opened)->field_meta(*index) == f.meta) && (*opened)->num_samples() > 0) {
        std::fprintf(stderr, "peek and load disagree on field '%s'\n", f.name.c_str());
        std::abort();
      }
    }
  return 0;
}

std::vector<std::string> rill_fuzz_seeds() {
  auto seed = [](char kind, const std::string& body) {
    std::string s(1, kind);
    s.append(body);
    return s;
  };
  return {seed('\0', idx_images()), seed('\1', idx_labels()), seed('\2', "label,a,b\n1,0.5,2\n0,1,3\n"),
          seed('\3', "0.5,2,1\n1,3,0\n"), seed('\4', token_file(1, 40)), seed('\4', token_file(2, 20)),
          seed('\5', "Call me Ishmael. Some years ago")};
}
