// Loading the samples and running a job in one process, for the runtime
// tests on CPUs and GPUs.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "runtime/cluster/job_runner.h"
#include "runtime/node/node_runtime.h"

namespace rill::testing {

inline std::string source_path(const std::string& relative) {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  return std::string(root ? root : ".") + "/" + relative;
}

// The MLP sample reads Fashion-MNIST from its Debian path; RILL_FASHION_MNIST
// names another folder (a GPU machine without the package).
inline graph::Job load_sample(const std::string& relative) {
  std::vector<std::string> overrides;
  if (const char* dir = std::getenv("RILL_FASHION_MNIST"); dir && relative.find("mlp") != std::string::npos) {
    const std::string d(dir);
    overrides = {"datasets.train.images=" + d + "/train-images-idx3-ubyte.gz",
                 "datasets.train.labels=" + d + "/train-labels-idx1-ubyte.gz",
                 "datasets.test.images=" + d + "/t10k-images-idx3-ubyte.gz",
                 "datasets.test.labels=" + d + "/t10k-labels-idx1-ubyte.gz"};
  }
  auto job = graph::load_job_file(source_path(relative), overrides);
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  return *job;
}

// An MLP sample (samples/mlp/...) on 4096 synthetic Fashion-MNIST-shaped
// samples instead of the files, without its eval pass: it starts at once.
inline graph::Job synthetic_mlp(const std::string& relative) {
  std::ifstream in(source_path(relative));
  nlohmann::json j = nlohmann::json::parse(in);
  j["datasets"] = nlohmann::json::array({{{"name", "train"},
                                          {"kind", "synthetic"},
                                          {"num_samples", 4096},
                                          {"num_classes", 10},
                                          {"feature_shape", {784}},
                                          {"seed", 7}}});
  j["inputs"][0]["field"] = "features";
  j.erase("eval");
  auto job = graph::parse_job_json(j.dump(), relative + " (synthetic)");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  return *job;
}

// A sample to train only (no eval pass, no generated text), its datasets'
// relative paths (the GPT samples' text) taken from the source folder.
inline graph::Job training_sample(const std::string& relative) {
  graph::Job job = load_sample(relative);
  job.eval.reset();
  job.generate.reset();
  for (DatasetSpec& d : job.datasets)
    if (!d.path.empty() && d.path[0] != '/') d.path = source_path(d.path);
  return job;
}

// bench/mlp_wide_synthetic.json (784-4096-4096-10) with `width` for 4096,
// compiled for one node of `devices` and built: what a node makes of a plan
// of that size (the tests make it too big to fit).
inline RunReport run_wide_mlp(int64_t width, const std::string& devices) {
  auto loaded = graph::load_job_file(source_path("bench/mlp_wide_synthetic.json"));
  REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
  graph::Job job = *loaded;
  for (graph::Variable& v : job.variables)
    for (int64_t& d : v.shape)
      if (d == 4096) d = width;
  auto cluster = compiler::parse_devices(devices, 1);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(job, *cluster, {});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  return run_plan(*plan, {});
}

// Linear regression on targets of 10^6 in f16 (tests of loss scaling): the
// loss (f32, about 10^12) is finite, but d loss / d pred is about 10^5 per
// sample, beyond f16's 65504 at any scale of 1 or more, so every step
// overflows.
inline graph::Job huge_targets_job() {
  graph::Job job;
  job.name = "huge_targets";
  graph::Dataset data;
  data.name = "points";
  data.kind = "inline";
  InlineTensor x{"x", {8, 3}, {}, {}}, y{"y", {8, 1}, {}, {}};
  for (int i = 0; i < 24; ++i) x.f32.push_back(static_cast<float>(i % 5) * 0.5f);
  for (int i = 0; i < 8; ++i) y.f32.push_back(1e6f);
  data.tensors = {x, y};
  job.datasets = {data};
  job.inputs = {{"x", "points", "x", {3}, DType::kF32, {}, {}}, {"y", "points", "y", {1}, DType::kF32, {}, {}}};
  graph::Variable w;
  w.name = "w";
  w.shape = {3, 1};
  w.init.attrs.set("value", 0.0);
  job.variables = {w};
  graph::Op predict{"pred", "matmul", {"x", "w"}, {"pred"}, {}, {}, {}};
  graph::Op mse{"loss", "mse_loss", {"pred", "y"}, {"loss"}, {}, {}, {}};
  mse.attrs.set("reduction", std::string("mean"));
  job.ops = {predict, mse};
  job.loss = "loss";
  job.train.batch_size = 8;
  job.train.steps = 10;
  job.train.precision = graph::Precision::kF16;
  return job;
}

// Runs `job` on this machine, silently; steps > 0 overrides the job's.
inline JobResult run(const graph::Job& job, const std::string& devices, int64_t steps = 0) {
  JobRunOptions options;
  options.devices = devices;
  options.steps = steps;
  options.out = nullptr;
  options.stall_timeout_s = 60;
  return run_job(job, options);
}

}  // namespace rill::testing
