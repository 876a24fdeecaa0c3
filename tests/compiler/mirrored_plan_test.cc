// The mirrored view (train.view "mirrored") seen through its plans.
#include <doctest/doctest.h>

#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

using testing::compile_ok;
using testing::plan_of;
using testing::tasks_of_kind;

std::vector<int64_t> dims(const plan::Shape* s) { return {s->dims()->begin(), s->dims()->end()}; }

}  // namespace

TEST_CASE("mirrored plans: batch_size rows per rank, tasks see their own pieces whole, a sink per rank") {
  graph::Job job = testing::linear_regression_job(16, 2);  // 2 rows a rank
  job.train.view = graph::View::kMirrored;
  job.fetch = {"w", "pred"};
  for (int nodes : {1, 2}) {
    CAPTURE(nodes);
    std::string bytes = compile_ok(job, "cpu:2", {}, nodes);
    const plan::Plan& p = *plan_of(bytes);
    const int ranks = 2 * nodes;
    CHECK(p.global_batch() == 2 * ranks);
    // Every compute task of the data path reads its rank's 2 rows as the
    // whole tensor: a mean (mse "mean") is over them.
    int computes = 0;
    for (const plan::Task* t : tasks_of_kind(p, plan::TaskKind::Compute)) {
      if (t->node() != 0) continue;
      if (t->op_type()->str() == "mse_loss" || t->op_type()->str() == "mse_loss_grad") {
        ++computes;
        CHECK(dims(t->logical_input_shapes()->Get(0)) == std::vector<int64_t>{2, 1});
      }
    }
    CHECK(computes == 4);  // loss and its gradient on node 0's 2 ranks
    // The loss enters the gradient with weight 1 / ranks.
    bool seeded = false;
    for (const plan::Task* t : tasks_of_kind(p, plan::TaskKind::Compute))
      if (t->name()->str().rfind("grad/loss/rank_mean", 0) == 0) seeded = true;
    CHECK(seeded);
    // The sink: one loss input per rank, each rank's own pieces fetched as they are.
    auto sinks = tasks_of_kind(p, plan::TaskKind::Sink);
    REQUIRE(sinks.size() == 1);
    const plan::SinkConf* sink = sinks[0]->sink();
    CHECK(sink->ranks() == ranks);
    CHECK(sink->names()->size() == static_cast<size_t>(ranks));
    REQUIRE(sink->fetch()->size() == static_cast<size_t>(2 * ranks));
    CHECK(sink->fetch()->Get(0)->str() == "w@0");
    CHECK(sink->fetch()->Get(static_cast<uint32_t>(2 * ranks - 1))->str() == fmt::format("pred@{}", ranks - 1));
  }
  // The consistent view of the same job: the global batch as written, the
  // logical tensors whole, and no per-rank sink.
  job.train.view = graph::View::kConsistent;
  job.train.batch_size = 4;
  const std::string bytes = compile_ok(job, "cpu:2");
  const plan::Plan& p = *plan_of(bytes);
  CHECK(p.global_batch() == 4);
  CHECK(tasks_of_kind(p, plan::TaskKind::Sink)[0]->sink()->ranks() == 0);
}

TEST_CASE("mirrored plans: a collective op reads its input through a boxing of the ranks' pieces taken whole") {
  graph::Job job = testing::linear_regression_job(16, 2);
  job.train.view = graph::View::kMirrored;
  job.ops.push_back({"mean_loss", "all_reduce", {"loss"}, {"mean_loss"}, Attrs{{"reduce", std::string("mean")}}, {}, {}});
  job.ops.push_back({"all_pred", "all_gather", {"pred"}, {"all_pred"}, {}, {}, {}});
  job.fetch = {"mean_loss", "all_pred"};
  for (int nodes : {1, 2}) {
    CAPTURE(nodes);
    std::string bytes = compile_ok(job, "cpu:1", {}, nodes);
    const plan::Plan& p = *plan_of(bytes);
    std::map<std::string, const plan::Task*> by_name;
    for (const plan::Task* t : *p.tasks()) by_name[t->name()->str()] = t;
    if (nodes == 1) {  // one rank: nothing to exchange, the op reads the piece as it is
      for (const auto& [name, t] : by_name) CHECK(name.rfind("collective:", 0) != 0);
      continue;
    }
    // Across 2 nodes: the loss (one scalar per rank) as parts of a sum, the
    // predictions ([2, 1] per rank) as rows of a [4, 1] tensor.
    const plan::Task* sum = by_name.at("collective:loss:P->B@node0");
    const plan::Task* gather = by_name.at("collective:pred:S(0)->B@node0");
    CHECK(sum->boxing()->peers()->size() == 2);
    const auto* gathered = compiler::find_regst(p, gather->outputs()->Get(0))->shape();
    CHECK(std::vector<int64_t>(gathered->begin(), gathered->end()) == std::vector<int64_t>{4, 1});
    CHECK(compiler::find_regst(p, sum->outputs()->Get(0))->shape()->size() == 0);
    // The ops read what those make; the mean's 1/ranks is the op's scale.
    const plan::Task* mean = by_name.at("mean_loss@0");
    CHECK(mean->inputs()->Get(0) == sum->outputs()->Get(0));
    CHECK(by_name.at("all_pred@0")->inputs()->Get(0) == gather->outputs()->Get(0));
    const std::string json = compiler::plan_json(p);
    CHECK(json.find("\"collective\": \"all_gather\"") != std::string::npos);
  }
}

}  // namespace rill
