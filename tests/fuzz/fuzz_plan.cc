// The plan verifier and reader (compiler::verify_plan, runtime/node/plan_reader.h):
// the bytes a node would build its runtime from.
#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "runtime/node/plan_reader.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto plan = rill::compiler::verify_plan(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!plan.ok()) return 0;
  // What the runtime reads of a verified plan.
  const rill::plan::Plan& p = **plan;
  if (p.tasks())
    for (const auto* task : *p.tasks()) {
      if (task->attrs()) (void)rill::read_attrs(task->attrs());
    }
  if (p.regsts())
    for (const auto* regst : *p.regsts()) (void)rill::read_shape(regst->shape());
  if (p.datasets())
    for (const auto* dataset : *p.datasets()) (void)rill::read_dataset(*dataset);
  return 0;
}

std::vector<std::string> rill_fuzz_seeds() {
  std::vector<std::string> seeds;
  const char* job_text = R"({"name": "seed",
    "datasets": [{"name": "d", "kind": "synthetic", "num_samples": 64, "num_classes": 3, "feature_shape": [4]}],
    "inputs": [{"name": "x", "dataset": "d", "field": "features", "shape": [4]},
               {"name": "y", "dataset": "d", "field": "label", "shape": [], "dtype": "i32"}],
    "variables": [{"name": "w", "shape": [4, 3], "init": {"type": "xavier_uniform", "seed": 1}}],
    "ops": [{"name": "logits", "type": "matmul", "inputs": ["x", "w"]},
            {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "y"]},
            {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}],
    "loss": "loss", "optimizer": {"type": "adam", "lr": 0.01},
    "train": {"steps": 4, "batch_size": 8}})";
  auto job = rill::graph::parse_job_json(job_text, "seed");
  if (!job.ok()) return seeds;
  for (const char* devices : {"cpu:1", "cpu:2"})
    for (int nodes : {1, 2}) {
      auto cluster = rill::compiler::parse_devices(devices, nodes);
      if (!cluster.ok()) continue;
      auto bytes = rill::compiler::compile(*job, *cluster, {});
      if (bytes.ok()) seeds.push_back(*bytes);
    }
  return seeds;
}
