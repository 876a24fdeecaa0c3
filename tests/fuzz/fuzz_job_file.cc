// The job file parser and checker (graph/job_file.h): any text a client
// submits.
#include <fstream>
#include <iterator>

#include "graph/job_file.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)rill::graph::parse_job_json(text, "fuzzed job");
  (void)rill::graph::parse_job_json(text, "fuzzed job", {"train.steps=3", "optimizer.lr=0.5"});
  return 0;
}

std::vector<std::string> rill_fuzz_seeds() {
  std::vector<std::string> seeds;
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  const std::string base = root ? root : ".";
  for (const char* sample : {"samples/linear_regression/linear_regression.json", "samples/mlp/mlp.json",
                             "samples/mlp/mlp_pipeline.json", "samples/mlp/mlp_hybrid.json",
                             "samples/pserver/mlp_pserver.json", "samples/ddp/ddp_collectives.json"}) {
    std::ifstream in(base + "/" + sample);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    if (!text.empty()) seeds.push_back(std::move(text));
  }
  return seeds;
}
