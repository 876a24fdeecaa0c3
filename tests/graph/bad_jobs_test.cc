// The bad-file corpus (tests/jobs/bad): each file holds one mistake, and
// expected.txt gives, per file, a part of the message it must produce. Also:
// damaged copies of good files (truncated, bytes flipped) never crash.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "graph/job_file.h"
#include "tests/graph/test_paths.h"

namespace rill::graph {
namespace {

using testing::source_path;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// expected.txt: "file.json: expected text" per line; '#' starts a comment.
std::map<std::string, std::string> read_expectations(const std::string& path) {
  std::map<std::string, std::string> expected;
  std::istringstream lines(read_text(path));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t colon = line.find(": ");
    REQUIRE_MESSAGE(colon != std::string::npos, "bad line in expected.txt: " << line);
    expected[line.substr(0, colon)] = line.substr(colon + 2);
  }
  return expected;
}

}  // namespace

TEST_CASE("every bad job file fails with its expected message, naming the file") {
  std::string dir = source_path("tests/jobs/bad");
  std::map<std::string, std::string> expected = read_expectations(dir + "/expected.txt");
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".json") files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  CHECK(files.size() >= 24);
  for (const std::string& file : files) {
    CAPTURE(file);
    auto it = expected.find(file);
    REQUIRE_MESSAGE(it != expected.end(), file << " has no line in expected.txt");
    std::string path = dir + "/" + file;
    Status status = check_job_file(path);
    REQUIRE_FALSE(status.ok());
    CHECK(status.code() == Code::kInvalidArgument);
    const std::string& message = status.message();
    CAPTURE(message);
    CHECK(message.rfind(path + ":", 0) == 0);  // starts with the file's path
    CHECK(message.find(it->second) != std::string::npos);
    expected.erase(it);
  }
  for (const auto& [file, text] : expected) FAIL_CHECK("expected.txt names a missing file: " << file);
}

TEST_CASE("truncated and byte-flipped job files give an error or a job, never a crash") {
  std::mt19937_64 rng(2024);
  const char kNasty[] = {'\0', '{', '}', '[', ']', '"', ',', ':', '\\', '-', '9', 'e', '/', '*', '\n', '\xff'};
  for (const char* sample : {"samples/mlp/mlp.json", "samples/linear_regression/linear_regression.json"}) {
    std::string good = read_text(source_path(sample));
    REQUIRE(parse_job_json(good, sample).ok());
    for (size_t length = 0; length < good.size(); length += 1 + good.size() / 400) {
      auto job = parse_job_json(std::string_view(good).substr(0, length), sample);
      CHECK_FALSE(job.ok());  // every proper prefix is incomplete
      CHECK(job.status().message().rfind(sample, 0) == 0);
    }
    int parsed = 0;
    for (int round = 0; round < 1500; ++round) {
      std::string damaged = good;
      for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips) {
        size_t at = rng() % damaged.size();
        damaged[at] = rng() % 2 ? kNasty[rng() % sizeof(kNasty)] : static_cast<char>(rng() % 256);
      }
      auto job = parse_job_json(damaged, sample);
      if (job.ok()) ++parsed;
      else CHECK_FALSE(job.status().message().empty());
    }
    CHECK(parsed < 1500);
  }
}

}  // namespace rill::graph
