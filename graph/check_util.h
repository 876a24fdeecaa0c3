// Helpers shared by the job checker's files (job_check.cc, check_config.cc):
// the issue list, "did you mean" suggestions, and what each dataset kind
// offers. Internal to graph/; pure functions, any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "graph/job.h"
#include "graph/job_check.h"

namespace rill::graph::check {

class Issues {
 public:
  template <typename... Args>
  void add(std::string path, fmt::format_string<Args...> format, Args&&... args) {
    issues_.push_back({std::move(path), fmt::format(format, std::forward<Args>(args)...)});
  }
  size_t size() const { return issues_.size(); }
  std::vector<JobIssue> take() { return std::move(issues_); }

 private:
  std::vector<JobIssue> issues_;
};

// "ops[3] (fc2)", or "ops[3]" when the element has no name.
std::string label(std::string_view section, size_t index, std::string_view name);

// " (did you mean 'matmul'?)" when a candidate is a close spelling of `word`,
// else "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

// "a, b, c, ..." listing at most `limit` names.
std::string name_list(const std::vector<std::string>& names, size_t limit = 8);

// True if every dim is in [1, 2^31) and the rank at most 8, so that shape
// arithmetic downstream cannot overflow.
bool sane_shape(const Shape& shape);

// A field a dataset offers; `shape` is per sample, unset when only the data
// tells (an idx file's image size, a csv file's column count).
struct FieldInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::optional<Shape> shape;
};

// The fields `dataset` offers, by its kind (see kernels/data/dataset_spec.h);
// empty for an unknown kind.
std::vector<FieldInfo> dataset_fields(const Dataset& dataset);

// Samples in the dataset when the spec alone tells (synthetic, inline), else -1.
int64_t known_num_samples(const Dataset& dataset);

const Dataset* find_dataset(const Job& job, std::string_view name);
std::vector<std::string> dataset_names(const Job& job);

// Checks of the sections other than the graph: datasets, optimizer, train, eval,
// checkpoint.
void check_datasets(const Job& job, Issues* issues);
void check_run_config(const Job& job, Issues* issues);
// Groups and pipeline stages (check_layout.cc).
void check_groups(const Job& job, Issues* issues);
void check_pipeline(const Job& job, Issues* issues);

}  // namespace rill::graph::check
