// Following a sequence's order through a graph (compiler/sequence_order.h),
// on the GPT samples' forward graphs: the marked tokens, targets and
// position table carry it through the embedding, the layers, the fused
// attention and the loss; a mark missing on the targets, a marked
// embedding table, a fetched activation and the composed attention's
// causal softmax are each named as the reason the order must stay.
#include "compiler/sequence_order.h"

#include <doctest/doctest.h>

#include <cstdlib>

#include "compiler/validate.h"
#include "graph/job_file.h"

namespace rill::compiler {
namespace {

LogicalGraph forward_of(const std::string& sample) {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  auto job = graph::load_job_file(std::string(root ? root : ".") + "/samples/" + sample);
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  auto cluster = parse_devices("cpu:1", 1);
  REQUIRE(cluster.ok());
  auto g = build_logical_graph(*job, *cluster, Mode::kTrain);
  REQUIRE_MESSAGE(g.ok(), g.status().to_string());
  return std::move(*g);
}

bool says(const SequenceOrder& order, const std::string& text) {
  return order.refused.find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("the marked tokens, targets and positions carry the order through the GPT to its loss") {
  const LogicalGraph g = forward_of("gpt_context/gpt_context.json");
  const std::map<std::string, int> marks = {{"idx", 1}, {"targets", 1}, {"wpe", 0}};
  const SequenceOrder order = follow_sequence_order(g, marks, 256, {});
  REQUIRE_MESSAGE(order.refused.empty(), order.refused);
  CHECK(order.axis.at("tok") == 1);          // [B, T, C]
  CHECK(order.axis.at("x0") == 1);
  CHECK(order.axis.at("h0.y.heads") == 2);   // the fused attention's [B, H, T, D]
  CHECK(order.axis.at("h3.y") == 1);         // merged back to [B, T, C]
  CHECK(order.axis.at("logits") == 1);
  CHECK(order.axis.at("xent") == 1);         // a loss per place
  CHECK(order.axis.count("loss") == 0);      // their mean: any order
  CHECK(order.axis.count("wte") == 0);
}

TEST_CASE("a missing mark, a marked table, a fetched activation and a causal softmax keep the natural order") {
  const LogicalGraph g = forward_of("gpt_context/gpt_context.json");
  // Targets unmarked: the loss would pair places of two orders.
  const SequenceOrder no_targets = follow_sequence_order(g, {{"idx", 1}, {"wpe", 0}}, 256, {});
  CHECK_MESSAGE(says(no_targets, "op 'xent' (sparse_softmax_cross_entropy) reads 'targets'"), no_targets.refused);
  // The position table unmarked: tokens in one order, positions in another.
  const SequenceOrder no_positions = follow_sequence_order(g, {{"idx", 1}, {"targets", 1}}, 256, {});
  CHECK_MESSAGE(says(no_positions, "op 'x0' (bias_add) reads 'wpe'"), no_positions.refused);
  // The token table has 256 rows, as many as the sequence's places: a
  // mark on it would reorder the vocabulary.
  const SequenceOrder table = follow_sequence_order(g, {{"idx", 1}, {"targets", 1}, {"wpe", 0}, {"wte", 0}}, 256, {});
  CHECK_MESSAGE(says(table, "op 'tok' reads its table 'wte' reordered"), table.refused);
  const SequenceOrder fetched = follow_sequence_order(g, {{"idx", 1}, {"targets", 1}, {"wpe", 0}}, 256, {"logits"});
  CHECK_MESSAGE(says(fetched, "the result fetches 'logits'"), fetched.refused);
  // The GPT sample's composed attention: its causal softmax reads places.
  const LogicalGraph composed = forward_of("gpt/gpt_moby.json");
  const SequenceOrder softmax = follow_sequence_order(composed, {{"idx", 1}, {"targets", 1}, {"wpe", 0}}, 128, {});
  CHECK_MESSAGE(says(softmax, "causal softmax"), softmax.refused);
}

}  // namespace rill::compiler
