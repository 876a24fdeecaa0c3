// Which node writes each variable piece into checkpoints
// (compiler/checkpoint_writers.h): the plans' marks and the master's
// variable_pieces agree for every layout, each distinct piece is written
// once, and a replicated model spreads over the nodes.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

using namespace testing;
using Written = std::tuple<std::string, std::vector<int64_t>, int>;  // variable, offset, node

// What the whole plan's variable tasks mark as written, by whom.
std::set<Written> marked(const std::string& bytes) {
  const plan::Plan& p = *plan_of(bytes);
  std::set<Written> out;
  for (const plan::Task* t : tasks_of_kind(p, plan::TaskKind::Variable)) {
    const plan::VariableConf& v = *t->variable();
    if (!v.checkpoint_writer()) continue;
    const plan::RegstDesc* model = regst(p, t->outputs()->Get(0));
    std::vector<int64_t> offset(v.offset()->begin(), v.offset()->end());
    std::string name = model->name()->str();
    if (v.whole() && v.whole()->size() > 0) {  // a pserver block: a piece of the whole variable
      name = v.whole()->str();
      for (size_t d = 0; d < offset.size(); ++d) offset[d] += v.whole_offset()->Get(static_cast<uint32_t>(d));
    }
    CHECK_MESSAGE(out.emplace(name, offset, t->node()).second, name);
  }
  return out;
}

TEST_CASE("every layout's plans mark one writer per distinct piece, the ones variable_pieces names") {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  const std::string samples = std::string(root ? root : ".") + "/samples/";
  const struct {
    const char* job;
    const char* devices;
    int nodes;
  } layouts[] = {
      {"mlp/mlp.json", "cpu:1", 2},          {"mlp/mlp.json", "cpu:2", 3},
      {"mlp/mlp_hybrid.json", "cpu:2", 2},   {"mlp/mlp_stages.json", "cpu:1", 2},
      {"mlp/mlp_model_parallel.json", "cpu:1", 2}, {"pserver/mlp_pserver.json", "cpu:1", 4},
  };
  for (const auto& layout : layouts) {
    CAPTURE(layout.job);
    CAPTURE(layout.nodes);
    auto job = graph::load_job_file(samples + layout.job);
    REQUIRE_MESSAGE(job.ok(), job.status().to_string());
    auto cluster = compiler::parse_devices(layout.devices, layout.nodes);
    REQUIRE(cluster.ok());
    auto pieces = compiler::variable_pieces(*job, *cluster);
    REQUIRE_MESSAGE(pieces.ok(), pieces.status().to_string());
    std::set<Written> named;
    for (const compiler::VariablePieceOrigin& p : *pieces) named.emplace(p.name, p.offset, p.writer);
    CHECK(marked(compile_ok(*job, layout.devices, {}, layout.nodes)) == named);
  }
}

// The MLP's six variables, each on every node: w1 (401k elements) goes to
// node 0, then every other variable to the node with fewer elements so far.
TEST_CASE("a replicated model's variables spread over the nodes by size") {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  auto job = graph::load_job_file(std::string(root ? root : ".") + "/samples/mlp/mlp.json");
  REQUIRE(job.ok());
  auto cluster = compiler::parse_devices("cpu:1", 2);
  REQUIRE(cluster.ok());
  auto pieces = compiler::variable_pieces(*job, *cluster);
  REQUIRE(pieces.ok());
  std::map<std::string, int> writer;
  for (const compiler::VariablePieceOrigin& p : *pieces) writer[p.name] = p.writer;
  CHECK(writer == std::map<std::string, int>{{"w1", 0}, {"b1", 1}, {"w2", 1}, {"b2", 1}, {"w3", 1}, {"b3", 1}});
}

}  // namespace
}  // namespace rill
