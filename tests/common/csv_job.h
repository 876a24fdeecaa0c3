// A small classifier job over a CSV file, declaring `features` features and
// the label in column `label_column`, as JSON text: what tests that exercise
// data files (missing, refused, disagreeing with the job) submit or run.
#pragma once

#include <cstdint>
#include <string>

namespace rill::testing {

inline std::string csv_classifier_job(const std::string& csv, int64_t features = 2, int64_t label_column = 2,
                                      int64_t steps = 5) {
  const std::string f = std::to_string(features);
  return R"({"name": "csv_job",
  "datasets": [{"name": "train", "kind": "csv", "path": ")" + csv + R"(", "label_column": )" +
         std::to_string(label_column) + R"(}],
  "inputs": [{"name": "x", "dataset": "train", "field": "features", "shape": [)" + f + R"(]},
             {"name": "y", "dataset": "train", "field": "label", "shape": [], "dtype": "i32"}],
  "variables": [{"name": "w", "shape": [)" + f + R"(, 2], "init": {"type": "fill", "value": 0}}],
  "ops": [{"name": "logits", "type": "matmul", "inputs": ["x", "w"]},
          {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "y"]},
          {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}],
  "loss": "loss", "optimizer": {"type": "sgd", "lr": 0.1},
  "train": {"steps": )" + std::to_string(steps) + R"(, "batch_size": 4, "shuffle": false}})";
}

}  // namespace rill::testing
