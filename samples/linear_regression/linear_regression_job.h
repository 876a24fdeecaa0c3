// The linear regression sample as a C++ job: y = x w fitted to four points by
// SGD on a summed squared error, built with rill::JobBuilder. It is the same
// job as samples/linear_regression/linear_regression.json. Any thread.
#pragma once

#include "graph/job.h"

namespace rill::samples {

graph::Job make_linear_regression_job();

}  // namespace rill::samples
