// The zigzag order's rewrite of a job (compiler/ring_balance.h): each
// marked input and variable read through a zigzag op of the ring's parts,
// in the tensor's group and on its placement; every causal attention told
// the order, a non-causal one left alone; a name the rewrite would take
// already taken is named. Which jobs it applies to is checked end to end
// (tests/e2e/context_test.cc).
#include "compiler/ring_balance.h"

#include <doctest/doctest.h>

namespace rill::compiler {
namespace {

graph::Op op(std::string name, std::string type, std::vector<std::string> inputs, Attrs attrs = {}) {
  graph::Op o;
  o.name = name;
  o.type = std::move(type);
  o.inputs = std::move(inputs);
  o.outputs = {std::move(name)};
  o.attrs = std::move(attrs);
  return o;
}

graph::Job small_job() {
  graph::Job job;
  job.name = "small";
  graph::Input idx;
  idx.name = "idx";
  idx.shape = {8};
  idx.sequence_axis = 1;
  graph::Input other;
  other.name = "other";
  other.shape = {8};
  job.inputs = {idx, other};
  graph::Variable wpe;
  wpe.name = "wpe";
  wpe.shape = {8, 4};
  wpe.sequence_axis = 0;
  job.variables = {wpe};
  job.ops = {op("tok", "embedding", {"idx", "wte"}), op("x", "bias_add", {"tok", "wpe"}),
             op("y", "attention", {"x", "x", "x"}, Attrs{{"causal", int64_t{1}}}),
             op("z", "attention", {"y", "y", "y"}), op("w", "add", {"other", "other"})};
  graph::Group group;
  group.name = "first";
  group.members = {"idx", "tok"};
  job.groups = {group};
  return job;
}

}  // namespace

TEST_CASE("in_zigzag_order reads each marked tensor through a zigzag op and tells the causal attentions") {
  auto job = in_zigzag_order(small_job(), 4);
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  std::map<std::string, const graph::Op*> ops;
  for (const graph::Op& o : job->ops) ops[o.name] = &o;
  REQUIRE(ops.count("idx.zigzag") == 1);
  REQUIRE(ops.count("wpe.zigzag") == 1);
  CHECK(ops.count("other.zigzag") == 0);
  for (const auto& [name, axis] : {std::pair<std::string, int64_t>{"idx.zigzag", 1}, {"wpe.zigzag", 0}}) {
    const graph::Op& z = *ops[name];
    CHECK(z.type == "zigzag");
    CHECK(z.outputs == std::vector<std::string>{name});
    CHECK(z.attrs.get_int("axis", -1) == axis);
    CHECK(z.attrs.get_int("parts", -1) == 4);
  }
  CHECK(ops["tok"]->inputs == std::vector<std::string>{"idx.zigzag", "wte"});
  CHECK(ops["x"]->inputs == std::vector<std::string>{"tok", "wpe.zigzag"});
  CHECK(ops["w"]->inputs == std::vector<std::string>{"other", "other"});
  CHECK(ops["y"]->attrs.get_int("zigzag", 1) == 4);
  CHECK_FALSE(ops["z"]->attrs.has("zigzag"));  // not causal: any order is the same
  // Each order comes just before its first reader (a pipeline's cut
  // follows the ops' order).
  std::vector<std::string> order;
  for (const graph::Op& o : job->ops) order.push_back(o.name);
  CHECK(order == std::vector<std::string>{"idx.zigzag", "tok", "wpe.zigzag", "x", "y", "z", "w"});
  // The group of idx holds its order too.
  const std::vector<std::string>& members = job->groups[0].members;
  CHECK(std::find(members.begin(), members.end(), "idx.zigzag") != members.end());
  CHECK(std::find(members.begin(), members.end(), "wpe.zigzag") == members.end());
}

TEST_CASE("in_zigzag_order names a tensor of the job that already takes the name of a tensor's order") {
  graph::Job job = small_job();
  job.ops.push_back(op("idx.zigzag", "identity", {"idx"}));
  auto ordered = in_zigzag_order(job, 2);
  REQUIRE_FALSE(ordered.ok());
  CHECK(ordered.status().message().find("input 'idx': the compiler names its zigzag order 'idx.zigzag', which the "
                                        "job already names") != std::string::npos);
  graph::Job variable = small_job();
  variable.variables.push_back(variable.variables[0]);
  variable.variables.back().name = "wpe.zigzag";
  variable.variables.back().sequence_axis.reset();
  CHECK_FALSE(in_zigzag_order(variable, 2).ok());
}

}  // namespace rill::compiler
