// Datasets kept between readers of the same files (kernels/data/
// dataset_cache.h): what is given again, and what is read again.
#include <doctest/doctest.h>

#include <chrono>
#include <new>
#include <thread>
#include <vector>

#include "kernels/data/dataset_cache.h"
#include "tests/kernels/data_test_util.h"

namespace rill {
namespace {

using namespace data_test;

DatasetSpec csv_spec(const std::string& path) {
  DatasetSpec spec;
  spec.name = "rows";
  spec.kind = "csv";
  spec.path = path;
  spec.label_column = 0;
  return spec;
}

// Files changed in the last second are read each time: the tests' files
// are left that long first.
void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(1100)); }

}  // namespace

TEST_SUITE("data") {

TEST_CASE("a dataset read from files is given again while they are unchanged, and read again when they change") {
  TempDir dir;
  write_text(dir.file("a.csv"), "1,0.5\n0,0.25\n");
  const DatasetSpec spec = csv_spec(dir.file("a.csv"));
  // Just written: read each time.
  auto fresh = Dataset::open(spec);
  REQUIRE(fresh.ok());
  CHECK(Dataset::open(spec).value() != *fresh);
  settle();
  const int64_t hits = kept_dataset_hits();
  auto first = Dataset::open(spec);
  REQUIRE(first.ok());
  auto again = Dataset::open(spec);
  REQUIRE(again.ok());
  CHECK(*again == *first);
  CHECK(kept_dataset_hits() == hits + 1);
  // Another spec of the same file is another dataset.
  DatasetSpec scaled = spec;
  scaled.scale = 2.0f;
  auto other = Dataset::open(scaled);
  REQUIRE(other.ok());
  CHECK(*other != *first);
  CHECK(gather_all<float>(**other, "features") == std::vector<float>{1.0f, 0.5f});
  // Rewritten with the same size: read again, the new values.
  write_text(dir.file("a.csv"), "1,0.75\n0,0.25\n");
  auto changed = Dataset::open(spec);
  REQUIRE(changed.ok());
  CHECK(*changed != *first);
  CHECK(gather_all<float>(**changed, "features") == std::vector<float>{0.75f, 0.25f});
  // Replaced by another file under the same name (a new inode): read again.
  settle();
  write_text(dir.file("b.csv"), "1,0.125\n0,0.25\n");
  settle();
  auto settled = Dataset::open(spec);
  REQUIRE(settled.ok());
  fs::rename(dir.file("b.csv"), dir.file("a.csv"));
  auto replaced = Dataset::open(spec);
  REQUIRE(replaced.ok());
  CHECK(gather_all<float>(**replaced, "features") == std::vector<float>{0.125f, 0.25f});
}

TEST_CASE("a kept dataset is refused to a reader whose access rules refuse its file") {
  TempDir dir;
  fs::create_directories(dir.file("data"));
  fs::create_directories(dir.file("other"));
  write_text(dir.file("data/a.csv"), "1,0.5\n");
  settle();
  const DatasetSpec spec = csv_spec(dir.file("data/a.csv"));
  REQUIRE(Dataset::open(spec).ok());
  REQUIRE(Dataset::open(spec).ok());
  auto refused = Dataset::open(spec, FileAccess{true, {dir.file("other")}, "--data-root"});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::kPermissionDenied);
  CHECK(Dataset::open(spec, FileAccess{true, {dir.file("data")}, "--data-root"}).ok());
}

TEST_CASE("readers of one dataset at once read it once") {
  TempDir dir;
  write_text(dir.file("a.csv"), "1,0.5\n0,0.25\n1,1\n");
  settle();
  const DatasetSpec spec = csv_spec(dir.file("a.csv"));
  const int64_t hits = kept_dataset_hits();
  std::vector<std::shared_ptr<const Dataset>> got(4);
  std::vector<std::thread> readers;
  for (size_t i = 0; i < got.size(); ++i)
    readers.emplace_back([&, i] {
      auto opened = Dataset::open(spec);
      if (opened.ok()) got[i] = *opened;
    });
  for (std::thread& t : readers) t.join();
  for (const auto& d : got) CHECK(d == got[0]);
  CHECK(got[0] != nullptr);
  CHECK(kept_dataset_hits() == hits + 3);
}

TEST_CASE("a read that throws leaves no later reader waiting") {
  TempDir dir;
  write_text(dir.file("a.csv"), "1,0.5\n");
  settle();
  const DatasetSpec spec = csv_spec(dir.file("a.csv"));
  CHECK_THROWS_AS(open_kept(spec, {}, []() -> StatusOr<std::shared_ptr<const Dataset>> { throw std::bad_alloc(); }),
                  std::bad_alloc);
  int reads = 0;
  auto opened = open_kept(spec, {}, [&] {
    ++reads;
    return Dataset::from_fields("rows", 1, {DatasetField{"v", TensorMeta{{}, DType::kF32}, {2.0f}, {}}});
  });
  REQUIRE(opened.ok());
  CHECK(reads == 1);
}

}  // TEST_SUITE

}  // namespace rill
