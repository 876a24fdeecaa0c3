// The GPT sample's plans: data parallel across nodes with one bucket of
// gradients and no gathered activations; tensor parallel (Megatron) with the
// heads split, and a device count that does not divide the heads refused,
// naming the reshape that would cut a head; the 2-D hybrid of the two.
#include <doctest/doctest.h>

#include <cstdlib>

#include "graph/job_file.h"
#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

graph::Job gpt_sample(const std::string& file) {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  auto job = graph::load_job_file(std::string(root ? root : ".") + "/samples/gpt/" + file);
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  return *job;
}

int boxings_named(const plan::Plan& p, const std::string& part) {
  int n = 0;
  for (const plan::Task* t : testing::tasks_of_kind(p, plan::TaskKind::Boxing)) n += t->name()->str().find(part) != std::string::npos;
  return n;
}

TEST_CASE("GPT data parallel on 2 nodes: every gradient in one all-reduce bucket, no activation gathered") {
  const std::string bytes = testing::compile_ok(gpt_sample("gpt_moby.json"), "cpu:1", {}, 2);
  const plan::Plan& p = *testing::plan_of(bytes);
  // With clipping on (the sample's 1.0) too: the gradients are summed as
  // their variables lie (B) before their squares are, so the square sums
  // need no reduction of their own. One task per node; nothing else crosses.
  CHECK(boxings_named(p, "bucket:") == 2);
  CHECK(testing::tasks_of_kind(p, plan::TaskKind::Boxing).size() == 2);
}

TEST_CASE("GPT tensor parallel on 2 devices: heads split; 3 devices cannot split 4 heads") {
  const std::string bytes = testing::compile_ok(gpt_sample("gpt_moby_tp.json"), "cpu:2");
  const plan::Plan& p = *testing::plan_of(bytes);
  // Each device computes its half of the heads' scores: [16, 2, 128, 128].
  for (const plan::Task* t : testing::computes_of_type(p, "softmax")) {
    const plan::RegstDesc* out = compiler::find_regst(p, t->outputs()->Get(0));
    REQUIRE(out != nullptr);
    CHECK(out->shape()->Get(1) == 2);
  }
  auto cluster = compiler::parse_devices("cpu:3", 1);
  REQUIRE(cluster.ok());
  auto three = compiler::compile(gpt_sample("gpt_moby_tp.json"), *cluster, {});
  REQUIRE_FALSE(three.ok());
  const std::string message = three.status().message();
  INFO(message);
  CHECK(message.find("op 'h0.q2' (reshape [16, 128, 128] -> [16, 128, 4, 32]): its input is split S(2) over 3 devices") !=
        std::string::npos);
}

TEST_CASE("GPT 2-D hybrid on 2 nodes x 2 devices: the batch split by node, the heads by device") {
  const std::string bytes = testing::compile_ok(gpt_sample("gpt_moby_hybrid.json"), "cpu:2", {}, 2);
  const plan::Plan& p = *testing::plan_of(bytes);
  // Each device computes its node's 8 rows and its 2 of the 4 heads: [8, 2, 128, 128].
  int softmaxes = 0;
  for (const plan::Task* t : testing::computes_of_type(p, "softmax")) {
    const plan::RegstDesc* out = compiler::find_regst(p, t->outputs()->Get(0));
    REQUIRE(out != nullptr);
    CHECK(out->shape()->Get(0) == 8);
    CHECK(out->shape()->Get(1) == 2);
    ++softmaxes;
  }
  CHECK(softmaxes == 4 * 4);  // 4 layers on 4 devices
}

TEST_CASE("a batch that does not split evenly into merged rows is gathered, not refused") {
  // [16, 128, 256] -> [2048, 256] on 3 devices: 6/5/5 batch rows are not
  // 683/683/682 merged rows, so the reshape reads its input whole.
  graph::Job job = gpt_sample("gpt_moby.json");
  for (graph::Op& op : job.ops)
    if (op.name == "xent") {
      graph::Op rows{"flat", "reshape", {"logits"}, {"flat"}, {{"shape", std::vector<int64_t>{-1, 256}}}, {}};
      graph::Op labels{"flat_targets", "reshape", {"targets"}, {"flat_targets"}, {{"shape", std::vector<int64_t>{-1}}}, {}};
      op.inputs = {"flat", "flat_targets"};
      job.ops.insert(job.ops.begin() + (&op - job.ops.data()), {rows, labels});
      break;
    }
  auto cluster = compiler::parse_devices("cpu:3", 1);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(job, *cluster, {});
  CHECK_MESSAGE(plan.ok(), plan.status().to_string());
}

}  // namespace
}  // namespace rill
