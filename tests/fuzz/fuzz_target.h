// A fuzz target: LLVMFuzzerTestOneInput takes any bytes and must neither
// crash, hang nor leak on them (errors are statuses); rill_fuzz_seeds gives
// well-formed inputs to start from. Each target is built twice: with
// libFuzzer, ASan and UBSan (tests/fuzz/libfuzzer.sh, clang) and with
// mutation_driver.cc, a short run of mutations in the test suite.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
std::vector<std::string> rill_fuzz_seeds();
