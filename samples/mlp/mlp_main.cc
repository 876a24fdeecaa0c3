// The MLP sample as a C++ program: the job is built with rill::JobBuilder
// (samples/mlp/mlp_job.cc). Run alone, it trains on this machine's devices:
//   build/samples/mlp_train [devices=cpu:1] [steps]
// Started by `rill launch ... build/samples/mlp_train`, the process of rank 0
// submits the same job to the cluster's master and prints its progress; the
// other processes have nothing to do (the cluster's agents run the actors).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/cluster/client.h"
#include "runtime/cluster/env.h"
#include "runtime/cluster/job_runner.h"
#include "samples/mlp/mlp_job.h"

int main(int argc, char** argv) {
  const char* master_addr = std::getenv("MASTER_ADDR");
  const char* master_port = std::getenv("MASTER_PORT");
  int64_t steps = argc > 2 ? std::atoll(argv[2]) : 0;
  if (master_addr && master_port && rill::env::world_size() > 1) {
    if (rill::env::rank() != 0) return 0;
    auto client = rill::Client::connect(std::string(master_addr) + ":" + master_port, 120);
    if (!client.ok()) {
      std::fprintf(stderr, "mlp_train: %s\n", client.status().to_string().c_str());
      return 1;
    }
    rill::SubmitOptions options;
    options.steps = steps;
    options.on_line = [](const std::string& line) { std::printf("%s\n", line.c_str()); };
    auto result = (*client)->submit(rill::samples::make_mlp_job(), options);
    if (!result.ok() || !result->status.ok()) {
      std::fprintf(stderr, "mlp_train: %s\n",
                   (result.ok() ? result->status : result.status()).to_string().c_str());
      return 1;
    }
    return 0;
  }
  rill::JobRunOptions options;
  options.devices = argc > 1 ? argv[1] : "cpu:1";
  options.steps = steps;
  rill::JobResult result = rill::run_job(rill::samples::make_mlp_job(), options);
  if (!result.status.ok()) {
    std::fprintf(stderr, "mlp_train: %s\n", result.status.to_string().c_str());
    return 1;
  }
  return 0;
}
