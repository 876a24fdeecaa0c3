// What each node's plan snapshots into checkpoints (snapshot_pieces) is
// exactly what the master expects that node to write
// (compiler::variable_pieces): in every layout, parameter servers whose
// node plans also number the trainers' tasks among them.
#include <doctest/doctest.h>

#include <cstdlib>
#include <set>
#include <utility>

#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "runtime/node/node_runtime.h"

namespace rill {
namespace {

TEST_CASE("each node's plan snapshots the pieces the master expects from that node, and no other") {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  const std::string samples = std::string(root ? root : ".") + "/samples/";
  const struct {
    const char* job;
    const char* devices;
    int nodes;
  } layouts[] = {{"mlp/mlp.json", "cpu:1", 3}, {"mlp/mlp_hybrid.json", "cpu:2", 2},
                 {"mlp/mlp_stages.json", "cpu:1", 2}, {"pserver/mlp_pserver.json", "cpu:1", 4}};
  for (const auto& layout : layouts) {
    CAPTURE(layout.job);
    auto job = graph::load_job_file(samples + layout.job);
    REQUIRE_MESSAGE(job.ok(), job.status().to_string());
    auto cluster = compiler::parse_devices(layout.devices, layout.nodes);
    REQUIRE(cluster.ok());
    auto expected = compiler::variable_pieces(*job, *cluster);
    REQUIRE(expected.ok());
    for (int node = 0; node < layout.nodes; ++node) {
      CAPTURE(node);
      compiler::CompileOptions options;
      options.node = node;
      auto plan = compiler::compile(*job, *cluster, options);
      REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
      auto pieces = snapshot_pieces(*plan);
      REQUIRE(pieces.ok());
      std::set<std::pair<std::string, std::vector<int64_t>>> got, want;
      for (const SnapshotPiece& p : *pieces) CHECK(got.emplace(p.name, p.offset).second);
      for (const compiler::VariablePieceOrigin& p : *expected)
        if (p.writer == node) want.emplace(p.name, p.offset);
      CHECK(got == want);
    }
  }
}

}  // namespace
}  // namespace rill
