#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "kernels/data/dataset.h"
#include "kernels/data/dataset_peek.h"
#include "kernels/data/file_bytes.h"
#include "tests/kernels/data_test_util.h"

namespace rill {
namespace {

using namespace data_test;
namespace fs = std::filesystem;

// idx images: pixel (i, p) = (i * 10 + p) mod 256.
Bytes idx_images(uint32_t n, uint32_t h, uint32_t w) {
  Bytes out;
  put_be32(&out, 0x00000803);
  for (uint32_t d : {n, h, w}) put_be32(&out, d);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t p = 0; p < h * w; ++p) out.push_back(static_cast<uint8_t>((i * 10 + p) % 256));
  return out;
}

// idx labels: label i = (i * 3) mod 10.
Bytes idx_labels(uint32_t n) {
  Bytes out;
  put_be32(&out, 0x00000801);
  put_be32(&out, n);
  for (uint32_t i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(i * 3 % 10));
  return out;
}

DatasetSpec idx_spec(const std::string& images, const std::string& labels) {
  DatasetSpec spec;
  spec.name = "digits";
  spec.kind = "idx";
  spec.images = images;
  spec.labels = labels;
  return spec;
}

}  // namespace

TEST_SUITE("data") {

TEST_CASE("idx files load, plain and gzip, detected by magic bytes not by name") {
  TempDir dir;
  for (bool gzip : {false, true}) {
    CAPTURE(gzip);
    // Names say the opposite of the contents on purpose.
    const std::string images = dir.file(gzip ? "images.idx" : "images.idx.gz");
    const std::string labels = dir.file(gzip ? "labels.idx" : "labels.idx.gz");
    (gzip ? write_gzip : write_file)(images, idx_images(5, 2, 3));
    (gzip ? write_gzip : write_file)(labels, idx_labels(5));
    DatasetSpec spec = idx_spec(images, labels);
    spec.scale = 0.5f;
    StatusOr<std::shared_ptr<const Dataset>> dataset = Dataset::open(spec);
    REQUIRE_MESSAGE(dataset.ok(), dataset.status().to_string());
    const Dataset& d = **dataset;
    CHECK(d.name() == "digits");
    CHECK(d.num_samples() == 5);
    CHECK(d.field_names() == std::vector<std::string>{"image", "label"});
    CHECK(d.field_meta(*d.field_index("image")) == TensorMeta{{6}, DType::kF32});
    CHECK(d.field_meta(*d.field_index("label")) == TensorMeta{{}, DType::kI32});

    std::vector<float> pixels = gather_all<float>(d, "image");
    REQUIRE(pixels.size() == 30);
    for (int i = 0; i < 5; ++i)
      for (int p = 0; p < 6; ++p) CHECK(pixels[i * 6 + p] == static_cast<float>((i * 10 + p) % 256) * 0.5f);
    CHECK(gather_all<int32_t>(d, "label") == std::vector<int32_t>{0, 3, 6, 9, 2});
  }
}

// A FIFO's writer may start long after the reader opened it (a slow data
// source): its bytes are read to the end; a FIFO nobody writes is an error
// after the idle limit; without `pipes` a FIFO is refused at once.
TEST_CASE("a dataset file may be a FIFO: read to its end once its writer comes, and a silent one is an error") {
  TempDir dir;
  const std::string fifo = dir.file("labels.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const Bytes labels = idx_labels(70000);  // several pipe buffers' worth
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    int fd = ::open(fifo.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    size_t done = 0;
    while (done < labels.size()) {
      ssize_t n = ::write(fd, labels.data() + done, labels.size() - done);
      REQUIRE(n > 0);
      done += static_cast<size_t>(n);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // in pieces
    }
    ::close(fd);
  });
  auto read = read_file_bytes(fifo, ReadOptions{.pipes = true, .pipe_idle_seconds = 30});
  writer.join();
  REQUIRE_MESSAGE(read.ok(), read.status().to_string());
  CHECK(*read == labels);

  auto silent = read_file_bytes(fifo, ReadOptions{.pipes = true, .pipe_idle_seconds = 1});
  CHECK(silent.status().code() == Code::kDeadlineExceeded);
  CHECK(silent.status().message().find("labels.fifo': a pipe that gave no bytes for 1 s") != std::string::npos);

  auto refused = read_file_bytes(fifo);
  CHECK(refused.status().code() == Code::kInvalidArgument);
  CHECK(refused.status().message().find("not a regular file (a FIFO)") != std::string::npos);
}

TEST_CASE("gather copies the requested samples in the requested order") {
  TempDir dir;
  write_file(dir.file("i"), idx_images(4, 1, 2));
  write_file(dir.file("l"), idx_labels(4));
  StatusOr<std::shared_ptr<const Dataset>> dataset = Dataset::open(idx_spec(dir.file("i"), dir.file("l")));
  REQUIRE(dataset.ok());
  const std::vector<int64_t> indices{3, 0, 3};
  std::vector<float> image(6, -1.0f);
  (*dataset)->gather(0, indices, image.data());
  CHECK(image == std::vector<float>{30, 31, 0, 1, 30, 31});
  std::vector<int32_t> label(3, -1);
  (*dataset)->gather(1, indices, label.data());
  CHECK(label == std::vector<int32_t>{9, 0, 9});
}

// An f32 field held as bytes (idx pixels): gathered as float(byte) * scale,
// the bits the f32 loop gives; bytes beside f32 values, in an i32 field, or
// too few, are refused.
TEST_CASE("an f32 field held as bytes gathers scaled floats; bytes where they do not belong are refused") {
  DatasetField bytes{"b", TensorMeta{{2}, DType::kF32}, {}, {}};
  bytes.u8 = {0, 1, 128, 255, 7, 9};
  bytes.u8_scale = 1.0f / 255.0f;
  auto made = Dataset::from_fields("d", 3, {bytes});
  REQUIRE_MESSAGE(made.ok(), made.status().to_string());
  std::vector<float> out(4, -1.0f);
  (*made)->gather(0, std::vector<int64_t>{2, 1}, out.data());
  const float scale = 1.0f / 255.0f;
  CHECK(out == std::vector<float>{7.0f * scale, 9.0f * scale, 128.0f * scale, 255.0f * scale});
  DatasetField both = bytes;
  both.f32.assign(6, 0.0f);
  CHECK_FALSE(Dataset::from_fields("d", 3, {both}).ok());
  DatasetField labels = bytes;
  labels.meta.dtype = DType::kI32;
  CHECK_FALSE(Dataset::from_fields("d", 3, {labels}).ok());
  CHECK_FALSE(Dataset::from_fields("d", 4, {bytes}).ok());
}

TEST_CASE("corrupt idx files give errors naming the file and the problem") {
  TempDir dir;
  const std::string images = dir.file("images"), labels = dir.file("labels");
  write_file(images, idx_images(3, 2, 2));
  write_file(labels, idx_labels(3));

  SUBCASE("missing file") {
    Status status = open_error(idx_spec(dir.file("nope"), labels));
    CHECK(status.code() == Code::kNotFound);
    CHECK(contains(status, dir.file("nope")));
    CHECK(contains(status, "No such file"));
  }
  SUBCASE("wrong magic, e.g. the files swapped") {
    Status status = open_error(idx_spec(labels, images));
    CHECK(status.code() == Code::kDataLoss);
    CHECK(contains(status, labels));
    CHECK(contains(status, "expected 0x00000803"));
    CHECK(contains(status, "found 0x00000801"));
  }
  SUBCASE("truncated values") {
    Bytes bytes = idx_images(3, 2, 2);
    bytes.resize(bytes.size() - 5);
    write_file(images, bytes);
    Status status = open_error(idx_spec(images, labels));
    CHECK(contains(status, images));
    CHECK(contains(status, "truncated file: header [3, 2, 2] needs 28 bytes, found 23"));
  }
  SUBCASE("truncated header") {
    write_file(images, Bytes{0, 0, 8, 3, 0, 0});
    CHECK(contains(open_error(idx_spec(images, labels)), "expected a 16-byte header, found 6 bytes"));
  }
  SUBCASE("dims whose product overflows 64 bits") {
    Bytes bytes;
    put_be32(&bytes, 0x00000803);
    for (int i = 0; i < 3; ++i) put_be32(&bytes, 0xffffffffu);
    write_file(images, bytes);
    CHECK(contains(open_error(idx_spec(images, labels)), "needs more than 2^64 bytes, found 16"));
  }
  SUBCASE("trailing data") {
    Bytes bytes = idx_images(3, 2, 2);
    bytes.push_back(7);
    write_file(images, bytes);
    CHECK(contains(open_error(idx_spec(images, labels)), "unexpected trailing data"));
  }
  SUBCASE("image count differs from label count") {
    write_file(labels, idx_labels(4));
    Status status = open_error(idx_spec(images, labels));
    CHECK(contains(status, "has 3 images but labels file"));
    CHECK(contains(status, "has 4 labels"));
  }
  SUBCASE("zero images") {
    write_file(images, idx_images(0, 2, 2));
    write_file(labels, idx_labels(0));
    CHECK(contains(open_error(idx_spec(images, labels)), "dimension 0 of the header is 0"));
  }
  SUBCASE("empty file") {
    write_file(images, Bytes{});
    CHECK(contains(open_error(idx_spec(images, labels)), "truncated file"));
  }
  SUBCASE("corrupt gzip stream") {
    write_gzip(images, idx_images(3, 2, 2));
    Bytes bytes = read_all(images);
    for (size_t i = 12; i < bytes.size(); ++i) bytes[i] ^= 0x5a;
    write_file(images, bytes);
    Status status = open_error(idx_spec(images, labels));
    CHECK(status.code() == Code::kDataLoss);
    CHECK(contains(status, images));
    CHECK(contains(status, "gzip"));
  }
  SUBCASE("truncated gzip stream") {
    write_gzip(images, idx_images(300, 28, 28));
    Bytes bytes = read_all(images);
    bytes.resize(bytes.size() / 2);
    write_file(images, bytes);
    Status status = open_error(idx_spec(images, labels));
    CHECK(contains(status, images));
    CHECK(contains(status, "truncated gzip stream"));
  }
  SUBCASE("no file named") {
    CHECK(contains(open_error(idx_spec("", labels)), "no images file given"));
  }
}

// A prerequisite, not an option: `./dev test` installs the package, and a
// machine without it fails here with the reason rather than passing silently.
TEST_CASE("Fashion-MNIST loads from the Debian package") {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  REQUIRE_MESSAGE(fs::is_directory(dir), dir << " is absent: apt-get install dataset-fashion-mnist (./dev test does)");
  DatasetSpec spec = idx_spec(dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz");
  spec.scale = 1.0f / 255.0f;
  auto start = std::chrono::steady_clock::now();
  StatusOr<std::shared_ptr<const Dataset>> train = Dataset::open(spec);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE_MESSAGE(train.ok(), train.status().to_string());
  MESSAGE("60000 Fashion-MNIST training images loaded in " << seconds << " s");  // about 0.2 s on an idle core
  CHECK((*train)->num_samples() == 60000);
  CHECK((*train)->field_meta(0) == TensorMeta{{784}, DType::kF32});
  std::vector<float> pixels = gather_all<float>(**train, "image");
  CHECK(*std::min_element(pixels.begin(), pixels.end()) == 0.0f);
  CHECK(*std::max_element(pixels.begin(), pixels.end()) == 1.0f);
  std::vector<int32_t> labels = gather_all<int32_t>(**train, "label");
  std::vector<int> per_class(10, 0);
  for (int32_t label : labels) {
    REQUIRE(label >= 0);
    REQUIRE(label <= 9);
    ++per_class[label];
  }
  CHECK(per_class == std::vector<int>(10, 6000));  // Fashion-MNIST is balanced

  spec = idx_spec(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz");
  StatusOr<std::shared_ptr<const Dataset>> test = Dataset::open(spec);
  REQUIRE_MESSAGE(test.ok(), test.status().to_string());
  CHECK((*test)->num_samples() == 10000);
  for (int32_t label : gather_all<int32_t>(**test, "label")) REQUIRE((label >= 0 && label <= 9));
}

// peek_dataset_fields: what a dataset's files hold per sample, from their
// heads, as loading them would say (rill check); and the mismatch message.
TEST_CASE("the heads of idx and CSV files give the fields a load gives, plain and gzip") {
  TempDir dir;
  for (bool gzip : {false, true}) {
    CAPTURE(gzip);
    const std::string images = dir.file("images"), labels = dir.file("labels");
    (gzip ? write_gzip : write_file)(images, idx_images(5, 2, 3));
    (gzip ? write_gzip : write_file)(labels, idx_labels(5));
    const DatasetSpec spec = idx_spec(images, labels);
    auto peeked = peek_dataset_fields(spec);
    REQUIRE_MESSAGE(peeked.ok(), peeked.status().to_string());
    REQUIRE(peeked->has_value());
    auto loaded = Dataset::open(spec);
    REQUIRE(loaded.ok());
    REQUIRE((*peeked)->size() == 2);
    for (const PeekedField& f : **peeked) {
      CAPTURE(f.name);
      CHECK(f.meta == (*loaded)->field_meta(*(*loaded)->field_index(f.name)));
    }
  }
  DatasetSpec csv;
  csv.name = "rows";
  csv.kind = "csv";
  csv.path = dir.file("rows.csv");
  csv.header = true;
  csv.label_column = 0;
  write_text(csv.path, "label,a,b,c\n1,0.5,0.25,2\n0,1,2,3\n");
  auto peeked = peek_dataset_fields(csv);
  REQUIRE_MESSAGE(peeked.ok(), peeked.status().to_string());
  REQUIRE(peeked->has_value());
  auto loaded = Dataset::open(csv);
  REQUIRE(loaded.ok());
  for (const PeekedField& f : **peeked) CHECK(f.meta == (*loaded)->field_meta(*(*loaded)->field_index(f.name)));
  CHECK((**peeked)[0].meta.shape == Shape{3});
}

TEST_CASE("peeking names a file that is missing or not of its kind; spec-made kinds are not peeked") {
  TempDir dir;
  DatasetSpec spec = idx_spec(dir.file("absent"), dir.file("absent2"));
  auto missing = peek_dataset_fields(spec);
  REQUIRE_FALSE(missing.ok());
  CHECK(contains(missing.status(), "absent"));
  CHECK(contains(missing.status(), "does not exist here"));
  write_file(dir.file("labels"), idx_labels(20));
  spec.images = spec.labels = dir.file("labels");  // a labels file where the images go
  auto wrong = peek_dataset_fields(spec);
  REQUIRE_FALSE(wrong.ok());
  CHECK(contains(wrong.status(), "not an idx images file"));
  // A pipe is read as a stream where the job runs: peeking never waits on
  // one (nobody writes to this one); a directory is named as such.
  REQUIRE(::mkfifo(dir.file("pipe").c_str(), 0600) == 0);
  spec.images = dir.file("pipe");
  auto pipe = peek_dataset_fields(spec);
  REQUIRE_FALSE(pipe.ok());
  CHECK(contains(pipe.status(), "is not a regular file (a pipe or a device)"));
  ::mkdir(dir.file("folder").c_str(), 0700);
  spec.images = dir.file("folder");
  CHECK(contains(peek_dataset_fields(spec).status(), "is a directory, not a file"));
  DatasetSpec synthetic;
  synthetic.kind = "synthetic";
  auto none = peek_dataset_fields(synthetic);
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());
  Status mismatch = data_mismatch("x", "image", idx_spec("i.gz", "l.gz"), {{700}, DType::kF32}, {{784}, DType::kF32});
  CHECK(mismatch.message() ==
        "input 'x' reads field 'image' of dataset 'digits' (images 'i.gz', labels 'l.gz'): the job declares [700] f32 "
        "per sample, the data holds [784] f32");
  CHECK(data_agrees({{28, 28}, DType::kF32}, {{784}, DType::kF32}));
  CHECK_FALSE(data_agrees({{784}, DType::kI32}, {{784}, DType::kF32}));
}

}  // TEST_SUITE

}  // namespace rill
