// The MLP sample as a C++ job: a 784-512-512-10 ReLU network classifying
// Fashion-MNIST, built with rill::JobBuilder. It is the same job as
// samples/mlp/mlp.json (a test holds the two equal). Any thread.
#pragma once

#include <string>

#include "graph/job.h"

namespace rill::samples {

// Where the Fashion-MNIST files of the dataset-fashion-mnist package live.
inline constexpr const char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

graph::Job make_mlp_job(const std::string& data_dir = kFashionMnistDir);

}  // namespace rill::samples
