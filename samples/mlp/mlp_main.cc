// The MLP sample as a C++ program: the job is built with rill::JobBuilder
// (samples/mlp/mlp_job.cc) and run on this machine's devices.
//   build/samples/mlp_train [devices=cpu:1] [steps]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/job_runner.h"
#include "samples/mlp/mlp_job.h"

int main(int argc, char** argv) {
  rill::JobRunOptions options;
  options.devices = argc > 1 ? argv[1] : "cpu:1";
  options.steps = argc > 2 ? std::atoll(argv[2]) : 0;
  rill::JobResult result = rill::run_job(rill::samples::make_mlp_job(), options);
  if (!result.status.ok()) {
    std::fprintf(stderr, "mlp_train: %s\n", result.status.to_string().c_str());
    return 1;
  }
  return 0;
}
