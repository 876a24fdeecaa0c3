// A short fuzz run without libFuzzer, for the test suite (any compiler):
// every seed (the target's own, and files in the folders given) is run, then
// ITERATIONS inputs made by mutating seeds at random (flipped bits, bytes set
// to edge values, cuts, repeated or deleted spans, splices of two seeds),
// from a fixed random seed so a failure repeats. A crash is the failure.
//   fuzz_X [--iterations N] [--seed S] [--write-seeds DIR] [CORPUS_DIR...]
// --write-seeds writes the target's seeds as files (a corpus for libFuzzer).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

namespace {

void run(const std::string& input) {
  // A copy in a buffer of its own size, so that reads past the end are
  // caught by the sanitizers where they run.
  std::vector<uint8_t> bytes(input.begin(), input.end());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
}

std::string mutate(const std::vector<std::string>& seeds, std::mt19937_64& rng) {
  std::string s = seeds[rng() % seeds.size()];
  const int edits = 1 + static_cast<int>(rng() % 8);
  for (int e = 0; e < edits; ++e) {
    const size_t at = s.empty() ? 0 : rng() % s.size();
    switch (rng() % 7) {
      case 0:
        if (!s.empty()) s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8)));
        break;
      case 1: {
        static const char edges[] = {0, 1, 127, -128, -1, '"', '{', '[', ':', ','};
        if (!s.empty()) s[at] = edges[rng() % sizeof edges];
        break;
      }
      case 2: s.resize(at); break;
      case 3: s.erase(at, rng() % 16); break;
      case 4: s.insert(at, s.substr(at, rng() % 16)); break;
      case 5: {
        const std::string& other = seeds[rng() % seeds.size()];
        const size_t from = other.empty() ? 0 : rng() % other.size();
        s = s.substr(0, at) + other.substr(from);
        break;
      }
      default:
        if (s.size() >= 4) {  // a 32-bit field set to an edge value
          const uint32_t values[] = {0, 1, 0x7fffffffu, 0x80000000u, 0xffffffffu, 0x10000u};
          const uint32_t v = values[rng() % 6];
          std::memcpy(&s[std::min(at, s.size() - 4)], &v, 4);
        }
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 20000;
  uint64_t seed = 1;
  std::string write_to;
  std::vector<std::string> seeds = rill_fuzz_seeds();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--iterations" && i + 1 < argc) iterations = std::atol(argv[++i]);
    else if (arg == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (arg == "--write-seeds" && i + 1 < argc) write_to = argv[++i];
    else
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        std::ifstream in(entry.path(), std::ios::binary);
        seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "no seeds\n");
    return 1;
  }
  if (!write_to.empty()) {
    std::filesystem::create_directories(write_to);
    for (size_t i = 0; i < seeds.size(); ++i)
      std::ofstream(std::filesystem::path(write_to) / ("seed-" + std::to_string(i)), std::ios::binary) << seeds[i];
    return 0;
  }
  for (const std::string& s : seeds) run(s);
  std::mt19937_64 rng(seed);
  for (long i = 0; i < iterations; ++i) run(mutate(seeds, rng));
  std::printf("%zu seeds and %ld mutations ran\n", seeds.size(), iterations);
  return 0;
}
