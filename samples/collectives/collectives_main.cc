// Collectives from a program: started by `rill launch` on every rank, it
// gets its communicator from the environment (rill::env::communicator), as
// a torch.distributed program does from env://, and calls collectives on
// its own tensors:
//   build/rill launch --nproc_per_node 3 build/samples/collectives_demo
// Rank r holds [r + 1, 2 (r + 1), 3 (r + 1)]; every rank prints the sum, the
// max and the average over the ranks, and rank 0 what it gathered. Then a
// 4 MiB tensor of r + 1 everywhere, summed: ranks on several machines alike
// sum it within each machine first ("machines first"), else by a ring.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/cluster/env.h"

int main() {
  auto communicator = rill::env::communicator();
  if (!communicator.ok()) {
    std::fprintf(stderr, "collectives_demo: %s\n", communicator.status().to_string().c_str());
    return 1;
  }
  rill::comm::Collectives& c = *communicator->collectives;
  const int rank = c.rank(), world = c.world();
  const float base = static_cast<float>(rank + 1);
  const std::vector<float> mine = {base, 2 * base, 3 * base};
  std::vector<float> sum(3), max(3), average(3), gathered(3 * static_cast<size_t>(world));
  rill::Status s = c.all_reduce(mine, sum, 1);
  if (s.ok()) s = c.all_reduce(mine, max, 2, rill::comm::ReduceOp::kMax);
  if (s.ok()) s = c.all_reduce(mine, average, 3, rill::comm::ReduceOp::kAverage);
  if (s.ok())
    s = c.gather(std::as_bytes(std::span<const float>(mine)), std::as_writable_bytes(std::span<float>(gathered)), 0, 4);
  std::vector<float> large(size_t{1} << 20, base);
  std::string large_by;
  if (s.ok()) s = c.all_reduce(large, large, 6);
  if (s.ok()) large_by = c.last_algorithm();
  if (s.ok()) s = c.barrier(5);  // every rank has what it needs before any closes its sockets
  if (!s.ok()) {
    std::fprintf(stderr, "collectives_demo: %s\n", s.to_string().c_str());
    return 1;
  }
  std::string line = fmt::format("rank {} of {}: sum {} max {} average {}", rank, world, sum, max, average);
  if (rank == 0) line += fmt::format(" gathered {}", gathered);
  // Every element of the large sum is the same: one stands for all, if all agree.
  const bool alike = std::all_of(large.begin(), large.end(), [&](float v) { return v == large[0]; });
  line += fmt::format("; 4 MiB sum {}{} ({})", large[0], alike ? "" : " (elements differ)", large_by);
  std::printf("%s\n", line.c_str());
  return 0;
}
