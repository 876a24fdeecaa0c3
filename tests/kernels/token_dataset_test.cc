// Token streams as datasets: a text file's bytes and llm.c's token files, cut
// into windows whose targets are the inputs one token on; splits; errors.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/data/dataset.h"
#include "kernels/data/dataset_peek.h"
#include "kernels/data/token_file.h"
#include "tests/kernels/data_test_util.h"

namespace rill {

using namespace data_test;

namespace {

DatasetSpec token_spec(const std::string& kind, const std::string& path, int64_t context) {
  DatasetSpec spec;
  spec.name = "text";
  spec.kind = kind;
  spec.path = path;
  spec.context = context;
  return spec;
}

Bytes token_file(int32_t magic, int32_t version, int32_t count, const std::vector<uint16_t>& ids) {
  Bytes bytes(1024, 0);
  const int32_t header[3] = {magic, version, count};
  std::memcpy(bytes.data(), header, sizeof header);
  const auto* p = reinterpret_cast<const uint8_t*>(ids.data());
  bytes.insert(bytes.end(), p, p + ids.size() * 2);
  return bytes;
}

}  // namespace

TEST_SUITE("data") {

TEST_CASE("a text file's bytes are tokens in windows of context, the targets one byte on") {
  TempDir dir;
  write_text(dir.file("t.txt"), "abcdefghij");
  auto d = Dataset::open(token_spec("text", dir.file("t.txt"), 3));
  REQUIRE_MESSAGE(d.ok(), d.status().to_string());
  CHECK((*d)->num_samples() == 3);  // (10 - 1) / 3 windows of 3 + 1 bytes
  CHECK((*d)->field_meta(0) == TensorMeta{{3}, DType::kI32});
  auto ids = [](const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); };
  CHECK(gather_all<int32_t>(**d, "tokens") == ids("abcdefghi"));
  CHECK(gather_all<int32_t>(**d, "targets") == ids("bcdefghij"));
  std::vector<int32_t> one(3);
  const int64_t second[] = {1};
  (*d)->gather(*(*d)->field_index("targets"), second, one.data());
  CHECK(one == ids("efg"));

  DatasetSpec held_out = token_spec("text", dir.file("t.txt"), 2);
  held_out.split_from = 0.5;  // bytes 5..9: "fghij", two windows of 2 + 1
  auto v = Dataset::open(held_out);
  REQUIRE(v.ok());
  CHECK(gather_all<int32_t>(**v, "tokens") == ids("fghi"));
  CHECK(gather_all<int32_t>(**v, "targets") == ids("ghij"));

  auto peeked = peek_dataset_fields(held_out);
  REQUIRE(peeked.ok());
  REQUIRE(peeked->has_value());
  CHECK((**peeked)[1].name == "targets");
  CHECK((**peeked)[1].meta == TensorMeta{{2}, DType::kI32});
}

TEST_CASE("llm.c token files: a 1024-byte header, then uint16 ids") {
  TempDir dir;
  write_file(dir.file("ok.bin"), token_file(20240520, 1, 7, {50256, 10, 11, 12, 13, 14, 15}));
  auto d = Dataset::open(token_spec("tokens", dir.file("ok.bin"), 2));
  REQUIRE_MESSAGE(d.ok(), d.status().to_string());
  CHECK((*d)->num_samples() == 3);
  CHECK(gather_all<int32_t>(**d, "tokens") == std::vector<int32_t>{50256, 10, 11, 12, 13, 14});
  CHECK(gather_all<int32_t>(**d, "targets") == std::vector<int32_t>{10, 11, 12, 13, 14, 15});

  write_file(dir.file("magic.bin"), token_file(1234, 1, 2, {1, 2}));
  CHECK(contains(open_error(token_spec("tokens", dir.file("magic.bin"), 1)), "magic 1234 is not llm.c's 20240520"));
  CHECK(!peek_dataset_fields(token_spec("tokens", dir.file("magic.bin"), 1)).ok());
  write_file(dir.file("short.bin"), token_file(20240520, 1, 9, {1, 2}));
  CHECK(contains(open_error(token_spec("tokens", dir.file("short.bin"), 1)),
                 "the header says 9 tokens but 4 bytes of 2-byte ids follow"));
  write_file(dir.file("version.bin"), token_file(20240520, 7, 2, {1, 2}));
  CHECK(contains(open_error(token_spec("tokens", dir.file("version.bin"), 1)), "version 7"));
  write_file(dir.file("head.bin"), Bytes(100, 0));
  CHECK(contains(open_error(token_spec("tokens", dir.file("head.bin"), 1)), "shorter than the 1024-byte header"));
}

TEST_CASE("token files as written are read back: uint16 ids, or uint32 past 65,535; a negative id is refused") {
  TempDir dir;
  const std::vector<int32_t> small = {50256, 0, 65535, 464, 13};
  REQUIRE(write_token_file(dir.file("small.bin"), small).ok());
  CHECK(std::filesystem::file_size(dir.file("small.bin")) == 1024 + 2 * small.size());
  auto back = read_token_file(dir.file("small.bin"));
  REQUIRE(back.ok());
  CHECK(*back == small);
  // The dataset reads what the writer wrote.
  auto d = Dataset::open(token_spec("tokens", dir.file("small.bin"), 2));
  REQUIRE_MESSAGE(d.ok(), d.status().to_string());
  CHECK(gather_all<int32_t>(**d, "tokens") == std::vector<int32_t>{50256, 0, 65535, 464});  // two windows of 2
  const std::vector<int32_t> wide = {1, 65536, 100000};
  REQUIRE(write_token_file(dir.file("wide.bin"), wide).ok());
  CHECK(std::filesystem::file_size(dir.file("wide.bin")) == 1024 + 4 * wide.size());
  CHECK(*read_token_file(dir.file("wide.bin")) == wide);
  const Status negative = write_token_file(dir.file("neg.bin"), std::vector<int32_t>{3, -1});
  CHECK(contains(negative, "token -1 at position 1 is negative"));
  CHECK_FALSE(std::filesystem::exists(dir.file("neg.bin")));
  CHECK(contains(read_token_file(dir.file("none.bin")).status(), "none.bin"));
}

TEST_CASE("a stream too short for one window, a bad context or split, a missing file: errors naming the dataset") {
  TempDir dir;
  write_text(dir.file("t.txt"), "abc");
  CHECK(contains(open_error(token_spec("text", dir.file("t.txt"), 3)), "hold no window of context 3 + 1"));
  CHECK(contains(open_error(token_spec("text", dir.file("t.txt"), 0)), "context is 0"));
  DatasetSpec bad = token_spec("text", dir.file("t.txt"), 1);
  bad.split_from = 0.8;
  bad.split_to = 0.2;
  CHECK(contains(open_error(bad), "split [0.8, 0.2]"));
  CHECK(contains(open_error(token_spec("text", dir.file("none.txt"), 1)), "none.txt"));
}

}  // TEST_SUITE

}  // namespace rill
