#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/data/dataset.h"
#include "tests/kernels/data_test_util.h"

namespace rill {

using namespace data_test;

TEST_SUITE("data") {

TEST_CASE("unknown dataset kind is an error") {
  DatasetSpec spec;
  spec.name = "d";
  spec.kind = "parquet";
  Status status = open_error(spec);
  CHECK(contains(status, "unknown kind 'parquet'"));
}

TEST_CASE("csv with a header and a label column") {
  TempDir dir;
  write_text(dir.file("d.csv"), "x,label,y\n1.5, 2 ,-3\r\n\n0,7,1e2\n");
  DatasetSpec spec;
  spec.name = "table";
  spec.kind = "csv";
  spec.path = dir.file("d.csv");
  spec.header = true;
  spec.label_column = 1;
  spec.scale = 2.0f;
  StatusOr<std::shared_ptr<const Dataset>> dataset = Dataset::open(spec);
  REQUIRE_MESSAGE(dataset.ok(), dataset.status().to_string());
  const Dataset& d = **dataset;
  CHECK(d.num_samples() == 2);
  CHECK(d.field_meta(*d.field_index("features")) == TensorMeta{{2}, DType::kF32});
  CHECK(gather_all<float>(d, "features") == std::vector<float>{3, -6, 0, 200});
  CHECK(gather_all<int32_t>(d, "label") == std::vector<int32_t>{2, 7});

  SUBCASE("without a label column every column is a feature") {
    spec.label_column = -1;
    spec.scale = 1.0f;
    StatusOr<std::shared_ptr<const Dataset>> all = Dataset::open(spec);
    REQUIRE(all.ok());
    CHECK((*all)->field_names() == std::vector<std::string>{"features"});
    CHECK(gather_all<float>(**all, "features") == std::vector<float>{1.5f, 2, -3, 0, 7, 100});
  }
}

TEST_CASE("bad csv gives errors naming file, line and column") {
  TempDir dir;
  const std::string path = dir.file("bad.csv");
  DatasetSpec spec;
  spec.name = "table";
  spec.kind = "csv";
  spec.path = path;
  spec.label_column = 0;

  write_text(path, "1,2,3\n4,5,6\n7,abc,9\n");
  Status status = open_error(spec);
  CHECK(contains(status, path));
  CHECK(contains(status, "line 3, column 2: cannot parse 'abc'"));

  CHECK_FALSE(contains(status, "header"));  // a word in the third row is no header

  // A header the dataset did not declare: the message says how to declare it.
  write_text(path, "label,x,y\n4,5,6\n");
  CHECK(contains(open_error(spec), "(dataset 'table'): line 1, column 1: cannot parse 'label' as a finite number "
                                   "(is line 1 a header? set \"header\": true on the dataset)"));

  // A file that is not there: the dataset and which setting names it.
  spec.path = dir.file("absent.csv");
  CHECK(contains(open_error(spec), "dataset 'table' (path): '" + spec.path + "': cannot open"));
  spec.path = path;

  write_text(path, "1,2,3\n4,5\n");
  CHECK(contains(open_error(spec), "line 2: expected 3 columns, found 2"));

  write_text(path, "1.5,2,3\n");
  CHECK(contains(open_error(spec), "line 1, column 1: label '1.5' is not a 32-bit integer"));

  write_text(path, "1,2,nan\n");
  CHECK(contains(open_error(spec), "line 1, column 3"));

  write_text(path, "a,b,c\n");
  spec.header = true;
  CHECK(contains(open_error(spec), "empty dataset"));

  write_text(path, "");
  CHECK(contains(open_error(spec), "empty dataset"));

  write_text(path, "1,2\n");
  spec.header = false;
  spec.label_column = 5;
  CHECK(contains(open_error(spec), "label_column 5 is out of range"));

  spec.path = dir.file("missing.csv");
  CHECK(open_error(spec).code() == Code::kNotFound);
}

TEST_CASE("synthetic data is deterministic, in range, and seed-dependent") {
  DatasetSpec spec;
  spec.name = "synth";
  spec.kind = "synthetic";
  spec.num_samples = 1000;
  spec.feature_shape = {4, 5};
  spec.num_classes = 4;
  spec.seed = 42;
  spec.scale = 3.0f;
  auto a = Dataset::open(spec), b = Dataset::open(spec);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK((*a)->field_meta(*(*a)->field_index("features")) == TensorMeta{{4, 5}, DType::kF32});
  std::vector<float> features = gather_all<float>(**a, "features");
  std::vector<int32_t> labels = gather_all<int32_t>(**a, "label");
  CHECK(features == gather_all<float>(**b, "features"));
  CHECK(labels == gather_all<int32_t>(**b, "label"));
  CHECK(*std::min_element(features.begin(), features.end()) >= 0.0f);
  CHECK(*std::max_element(features.begin(), features.end()) < 3.0f);
  std::vector<int> per_class(4, 0);
  for (int32_t label : labels) {
    REQUIRE(label >= 0);
    REQUIRE(label < 4);
    ++per_class[label];
  }
  for (int count : per_class) CHECK(count > 100);  // every class well represented

  spec.seed = 43;
  auto c = Dataset::open(spec);
  REQUIRE(c.ok());
  CHECK(features != gather_all<float>(**c, "features"));

  spec.num_samples = 0;
  CHECK(contains(open_error(spec), "empty dataset"));
  spec.num_samples = int64_t{1} << 40;
  CHECK(contains(open_error(spec), "limit"));
  spec.num_samples = 10;
  spec.feature_shape = {3, 0};
  CHECK(contains(open_error(spec), "feature_shape [3, 0]"));
}

TEST_CASE("inline tensors become fields; mismatches are errors") {
  DatasetSpec spec;
  spec.name = "tiny";
  spec.kind = "inline";
  spec.tensors.push_back({"x", {3, 2}, DType::kF32, {1, 2, 3, 4, 5, 6}, {}});
  spec.tensors.push_back({"y", {3}, DType::kI32, {}, {0, 1, 0}});
  StatusOr<std::shared_ptr<const Dataset>> dataset = Dataset::open(spec);
  REQUIRE_MESSAGE(dataset.ok(), dataset.status().to_string());
  const Dataset& d = **dataset;
  CHECK(d.num_samples() == 3);
  CHECK(d.field_meta(0) == TensorMeta{{2}, DType::kF32});
  CHECK(d.field_meta(1) == TensorMeta{{}, DType::kI32});
  CHECK(gather_all<float>(d, "x") == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(gather_all<int32_t>(d, "y") == std::vector<int32_t>{0, 1, 0});
  StatusOr<int> missing = d.field_index("label");
  CHECK(missing.status().code() == Code::kNotFound);
  CHECK(contains(missing.status(), "no field 'label'; its fields are: x, y"));

  DatasetSpec bad = spec;
  bad.tensors[1].shape = {4};
  bad.tensors[1].i32 = {0, 1, 0, 1};
  CHECK(contains(open_error(bad), "tensor 'y': shape [4] has 4 samples on axis 0, but tensor 'x' has 3"));
  bad = spec;
  bad.tensors[0].f32.pop_back();
  CHECK(contains(open_error(bad), "tensor 'x': shape [3, 2] needs 6 values, found 5"));
  bad = spec;
  bad.tensors[1].name = "x";
  CHECK(contains(open_error(bad), "field 'x' appears twice"));
  bad = spec;
  bad.tensors.clear();
  CHECK(contains(open_error(bad), "no tensors"));
}

}  // TEST_SUITE

}  // namespace rill
