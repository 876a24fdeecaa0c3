// Placements in job files and the C++ API: the parser, the canonical text,
// round trips through job files, and the checker's group rules.
#include <doctest/doctest.h>

#include "graph/job_builder.h"
#include "graph/job_check.h"
#include "graph/job_file.h"
#include "graph/placement.h"
#include "samples/mlp/mlp_job.h"

namespace rill::graph {
namespace {

Placement parsed(const std::string& text) {
  auto p = parse_placement(text);
  REQUIRE_MESSAGE(p.ok(), p.status().to_string());
  return *p;
}

std::string error_of(const std::string& text) {
  auto p = parse_placement(text);
  REQUIRE(!p.ok());
  return p.status().message();
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("placements parse into nodes x devices, ranks node by node, and read back from their text") {
  Placement p = parsed("cpu 0:0-1, 1:0-1");
  CHECK(p.type == DeviceType::kCpu);
  CHECK(p.nodes == std::vector<int>{0, 1});
  CHECK(p.devices == std::vector<int>{0, 1});
  CHECK(!p.two_d);
  CHECK(p.parallel() == 4);
  CHECK(p.node_of(3) == 1);
  CHECK(p.device_of(3) == 1);
  CHECK(p.to_string() == "cpu 0-1:0-1");

  Placement two = parsed("cpu [2,2] 0:0-1, 1:0-1");
  CHECK(two.two_d);
  CHECK(two.same_devices(p));
  CHECK(!(two == p));
  CHECK(two.to_string() == "cpu [2,2] 0-1:0-1");

  Placement gaps = parsed("cuda 3:2, 0:0 , 0:2, 3:0");  // any order, spaces
  CHECK(gaps.type == DeviceType::kCuda);
  CHECK(gaps.nodes == std::vector<int>{0, 3});
  CHECK(gaps.devices == std::vector<int>{0, 2});
  CHECK(gaps.node_of(2) == 3);
  CHECK(gaps.device_of(1) == 2);
  for (const Placement& q : {p, two, gaps, parsed("cpu 5:7"), parsed("cpu [4] 0-3:0"), parsed("cpu 0-127:0-7")})
    CHECK(parsed(q.to_string()).same_devices(q));
  CHECK(parsed("cpu [4] 0-1:0-1").same_devices(p));
  CHECK(!parsed("cpu [4] 0-1:0-1").two_d);
  CHECK(whole_cluster(DeviceType::kCpu, 2, 2).same_devices(p));

  // Without a type: the job's devices' (the compiler sets it), so one job
  // file runs on --devices cpu:N and cuda:N alike.
  Placement any = parsed("0:0-1, 1:0-1");
  CHECK(any.any_type);
  CHECK(any.nodes == p.nodes);
  CHECK(any.devices == p.devices);
  CHECK(any.to_string() == "0-1:0-1");
  CHECK(parsed(any.to_string()) == any);
  Placement any_two = parsed("[2,2] 0-1:0-1");
  CHECK(any_two.any_type);
  CHECK(any_two.two_d);
  CHECK(any_two.to_string() == "[2,2] 0-1:0-1");
  CHECK(!parsed("cpu 0:0").any_type);
  Placement every = parsed("0:*, 1:*");  // every device of nodes 0 and 1
  CHECK(every.any_type);
  CHECK(every.all_devices);
  CHECK(every.nodes == std::vector<int>{0, 1});
  CHECK(every.devices.empty());
  CHECK(every.to_string() == "0-1:*");
  CHECK(parsed(every.to_string()) == every);
  CHECK(parsed("cuda 2:*").to_string() == "cuda 2:*");
}

TEST_CASE("bad placements are errors naming the text and what is wrong") {
  CHECK(has(error_of("gpu 0:0"), "unknown device type 'gpu'"));
  CHECK(has(error_of("cpu"), "no devices"));
  CHECK(has(error_of("cpu 0"), "'0' is not NODES:DEVICES"));
  CHECK(has(error_of("cpu 0:1-0"), "'1-0' is not a device"));
  CHECK(has(error_of("cpu x:0"), "'x' is not a node"));
  CHECK(has(error_of("cpu 0:0, 0:0"), "device 0 of node 0 is listed twice"));
  CHECK(has(error_of("cpu 0:0-1, 1:0"), "every node must have the same devices"));
  CHECK(has(error_of("cpu [3] 0:0-1"), "hierarchy [3] over 2 devices"));
  CHECK(has(error_of("cpu [2,2] 0:0-3"), "a 2-D hierarchy is [nodes, devices per node], here [1,4]"));
  CHECK(has(error_of("cpu [2,2,1] 0-1:0-1"), "at most 2 axes"));
  CHECK(has(error_of("cpu [2,2 0-1:0-1"), "'[' without ']'"));
  CHECK(has(error_of("cpu 0:0-70000"), "is not a device"));
  CHECK(has(error_of("cpu 0:0\x01"), "is not a device"));
  CHECK(has(error_of("0:*, 1:0"), "'*' (every device of a node) goes in every entry or in none"));
  CHECK(has(error_of("0:*, 0:*"), "node 0 is listed twice"));
  CHECK(has(error_of("[2] 0-1:*"), "a hierarchy needs the devices named"));
}

Job staged_mlp() {
  Job job = samples::make_mlp_job();
  job.groups.push_back({"stage0", parsed("cpu 0:0-1"), {"x", "y", "w1", "b1", "fc1", "fc1_bias", "h1"}});
  job.groups.push_back({"stage1", parsed("cpu [2,1] 1-2:0"), {"w2", "fc2"}});
  job.ops.back().placement = parsed("cpu 1:0");
  return job;
}

TEST_CASE("groups and placements round-trip through job files") {
  Job job = staged_mlp();
  REQUIRE_MESSAGE(check_job(job).ok(), check_job(job).to_string());
  auto text = job_to_json(job);
  REQUIRE_MESSAGE(text.ok(), text.status().to_string());
  CHECK(has(*text, R"("placement": "cpu [2,1] 1-2:0")"));
  auto back = parse_job_json(*text, "staged.json");
  REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  CHECK(*back == job);
}

TEST_CASE("JobBuilder places ops and variables, and groups tensors by the ops that make them") {
  JobBuilder b("placed");
  auto x = b.input("x", "d", "x", {4}, DType::kF32, std::nullopt, parsed("cpu 0:0"));
  auto w = b.variable("w", {4, 2}, init::zeros(), {.placement = parsed("cpu 1:0")});
  auto h = b.matmul(x, w, {.name = "fc", .placement = parsed("cpu 1:0")});
  auto outs = b.op_outputs("identity", {h}, 1, {}, {.name = "copy"});
  b.group("tail", parsed("cpu 0-1:0"), {outs[0]});
  const Job& job = b.job();
  CHECK(job.inputs[0].placement == parsed("cpu 0:0"));
  CHECK(job.variables[0].placement == parsed("cpu 1:0"));
  CHECK(job.ops[0].placement == parsed("cpu 1:0"));
  REQUIRE(job.groups.size() == 1);
  CHECK(job.groups[0].members == std::vector<std::string>{"copy"});
}

TEST_CASE("the checker names group mistakes: unknown members, members placed twice, repeated names") {
  Job job = staged_mlp();
  job.groups[1].members.push_back("fc_2");
  job.groups[1].members.push_back("fc1");
  job.groups.push_back({"stage0", parsed("cpu 0:0"), {}});
  job.ops.front().placement = parsed("cpu 0:0");  // fc1, also in stage0
  std::string all;
  for (const JobIssue& issue : find_job_issues(job)) all += issue.path + ": " + issue.message + "\n";
  CHECK(has(all, "groups[1].members[2]: groups[1] (stage1): 'fc_2' is not an input, variable or op of the job"));
  CHECK(has(all, "did you mean 'fc2'"));
  CHECK(has(all, "op 'fc1' is already placed by ops[0] (fc1)"));
  CHECK(has(all, "group name 'stage0' is used twice"));
  CHECK(has(all, "groups[2] (stage0): the group has no members"));

  auto bad = parse_job_json(R"({"name": "j", "groups": [{"name": "g", "placement": "cpu 0:0-1, 1:0", "members": []}]})",
                            "bad.json");
  REQUIRE(!bad.ok());
  CHECK(has(bad.status().message(), "groups[0] (g): placement 'cpu 0:0-1, 1:0'"));
  CHECK(has(bad.status().message(), "every node must have the same devices"));
}

}  // namespace
}  // namespace rill::graph
