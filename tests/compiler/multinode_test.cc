// Plans for several nodes: one boxing task per node over its local pieces,
// with peers and a collective tag; Send/Recv pairs for regsts read on another
// node; per-node shards; determinism; conversions not supported across nodes.
// Node plans: node_plan_test.cc.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "graph/job_file.h"
#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

using plan::TaskKind;
using testing::compile_ok;
using testing::plan_of;
using testing::producer;
using testing::regst;
using testing::sbp_string;
using testing::task;
using testing::task_named;
using testing::tasks_of_kind;

std::vector<int64_t> ints(const flatbuffers::Vector<int64_t>* v) { return {v->begin(), v->end()}; }
std::vector<uint64_t> ids(const flatbuffers::Vector<uint64_t>* v) { return {v->begin(), v->end()}; }

// On CPU devices a task reads a regst of another node where it is made (its
// node keeps mirror slots that the `ready` fills): no Send/Recv tasks, and
// a regst's consumers on other nodes are only the few tasks that read across
// nodes (the sink, moves between placements), each listed once.
void check_locality(const plan::Plan& p) {
  CHECK(tasks_of_kind(p, TaskKind::Send).empty());
  CHECK(tasks_of_kind(p, TaskKind::Recv).empty());
  for (const plan::RegstDesc* r : *p.regsts())
    for (uint64_t c : *r->consumers()) {
      if (ActorId::node(c) == ActorId::node(r->producer())) continue;
      const plan::Task* reader = task(p, c);
      CHECK_MESSAGE((reader->kind() == TaskKind::Sink || reader->boxing() != nullptr), r->name()->str(), " #",
                    r->id(), " read on node ", reader->node(), " by ", reader->name()->str());
    }
}

TEST_CASE("linear regression on 2 nodes x 1 device: a boxing task per node, node 1's loss sent to the sink") {
  const std::string bytes = compile_ok(testing::linear_regression_job(), "cpu:1", {}, 2);
  const plan::Plan& p = *plan_of(bytes);
  CHECK(p.num_nodes() == 2);
  CHECK(p.devices_per_node() == 1);
  CHECK(p.node() == -1);
  CHECK(p.num_tasks() == static_cast<int64_t>(p.tasks()->size()));

  auto boxings = tasks_of_kind(p, TaskKind::Boxing);
  REQUIRE(boxings.size() == 2);
  for (uint32_t node = 0; node < 2; ++node) {
    const plan::Task* box = boxings[node];
    CHECK(box->node() == static_cast<int>(node));
    CHECK(box->id() == ActorId::make(node, DeviceType::kComm, 0, 0, ActorId::index(box->id())));
    CHECK(box->device() == -1);
    const plan::BoxingConf* conf = box->boxing();
    CHECK(sbp_string(conf->in_sbp()) == "P");
    CHECK(sbp_string(conf->out_sbp()) == "B");
    CHECK(conf->parallel() == 2);
    CHECK(conf->num_nodes() == 2);
    CHECK(conf->node() == static_cast<int>(node));
    CHECK(conf->local_pieces() == 1);
    CHECK(conf->first_rank() == static_cast<int>(node));
    CHECK(conf->collective_tag() != 0);
    CHECK(conf->collective_tag() == boxings[0]->boxing()->collective_tag());
    CHECK(ids(conf->peers()) == std::vector<uint64_t>{boxings[0]->id(), boxings[1]->id()});
    REQUIRE(box->inputs()->size() == 1);
    REQUIRE(box->outputs()->size() == 1);
    const plan::Task* grad = producer(p, box->inputs()->Get(0));
    CHECK(grad->op_type()->str() == "matmul");
    CHECK(grad->node() == static_cast<int>(node));
    const plan::RegstDesc* out = regst(p, box->outputs()->Get(0));
    CHECK(ints(out->shape()) == std::vector<int64_t>{3, 1});
    CHECK(ids(out->consumers()) == std::vector<uint64_t>{task_named(p, fmt::format("w@{}", node))->id()});
  }

  const plan::Task* sink = tasks_of_kind(p, TaskKind::Sink)[0];
  CHECK(sink->node() == 0);
  REQUIRE(sink->inputs()->size() == 2);
  CHECK(producer(p, sink->inputs()->Get(0)) == task_named(p, "mse@0"));
  CHECK(sink->sink()->partial()->Get(0));
  CHECK(sink->sink()->partial()->Get(1));

  // Node 1's loss is read by the sink on node 0 where it is made: its
  // consumers are node 1's gradient seed and the sink.
  const plan::RegstDesc* loss1 = regst(p, sink->inputs()->Get(1));
  CHECK(producer(p, loss1->id()) == task_named(p, "mse@1"));
  const std::vector<uint64_t> readers = ids(loss1->consumers());
  CHECK(std::count(readers.begin(), readers.end(), sink->id()) == 1);
  for (uint64_t c : readers)
    if (c != sink->id()) CHECK(ActorId::node(c) == 1);
  CHECK(loss1->register_num() == 1);  // made from the model: the next one only after the updates
  CHECK(sbp_string(loss1->sbp()) == "P");
  check_locality(p);

  // Per-node datasets: the source on node n reads shard n of 2.
  auto sources = tasks_of_kind(p, TaskKind::Source);
  REQUIRE(sources.size() == 2);
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(sources[rank]->node() == rank);
    CHECK(sources[rank]->source()->shard() == rank);
    CHECK(sources[rank]->source()->num_shards() == 2);
  }
}

TEST_CASE("MLP on 2 nodes x 2 devices: three gradient boxings per node, each on its own comm thread") {
  compiler::CompileOptions options;
  options.activation_register_num = 3;
  graph::Job job = testing::mlp_job(8, 4);
  job.train.bucket_bytes = 0;  // one boxing per gradient (buckets: below)
  const std::string bytes = compile_ok(job, "cpu:2", options, 2);
  const plan::Plan& p = *plan_of(bytes);
  auto boxings = tasks_of_kind(p, TaskKind::Boxing);
  CHECK(boxings.size() == 6);
  std::map<int64_t, std::vector<const plan::Task*>> by_tag;
  std::set<std::string> updated;
  for (int node = 0; node < 2; ++node) {
    std::set<uint32_t> threads;
    for (const plan::Task* box : boxings) {
      if (box->node() != node) continue;
      threads.insert(ActorId::device(box->id()));
      CHECK(ActorId::device_type(box->id()) == DeviceType::kComm);
      const plan::BoxingConf* conf = box->boxing();
      CHECK(sbp_string(conf->in_sbp()) == "P");
      CHECK(sbp_string(conf->out_sbp()) == "B");
      CHECK(conf->parallel() == 4);
      CHECK(conf->num_nodes() == 2);
      CHECK(conf->local_pieces() == 2);
      CHECK(conf->first_rank() == 2 * node);
      by_tag[conf->collective_tag()].push_back(box);
      REQUIRE(box->inputs()->size() == 2);
      REQUIRE(box->outputs()->size() == 1);  // one B result, read by both devices
      const plan::RegstDesc* out = regst(p, box->outputs()->Get(0));
      REQUIRE(out->consumers()->size() == 2);
      for (uint32_t d = 0; d < 2; ++d) {
        const plan::Task* grad = producer(p, box->inputs()->Get(d));
        CHECK(grad->node() == node);
        CHECK(grad->device() == static_cast<int>(d));
        const plan::Task* var = task(p, out->consumers()->Get(d));
        CHECK(var->kind() == TaskKind::Variable);
        CHECK(var->node() == node);
        CHECK(var->device() == static_cast<int>(d));
        updated.insert(var->name()->str());
      }
    }
    CHECK(threads == std::set<uint32_t>{0, 1, 2});
  }
  CHECK(updated.size() == 12);  // 3 variables x 4 ranks
  // One tag per logical boxing, on both nodes, with the same comm thread number there.
  REQUIRE(by_tag.size() == 3);
  for (const auto& [tag, pair] : by_tag) {
    CHECK(tag != 0);
    REQUIRE(pair.size() == 2);
    CHECK(pair[0]->node() == 0);
    CHECK(pair[1]->node() == 1);
    CHECK(ActorId::device(pair[0]->id()) == ActorId::device(pair[1]->id()));
    for (const plan::Task* box : pair)
      CHECK(ids(box->boxing()->peers()) == std::vector<uint64_t>{pair[0]->id(), pair[1]->id()});
  }

  // The sink reads loss and accuracy of every rank where they are made.
  const plan::Task* sink = tasks_of_kind(p, TaskKind::Sink)[0];
  REQUIRE(sink->inputs()->size() == 8);
  for (uint32_t i = 0; i < 8; ++i) {
    const int rank = static_cast<int>(i % 4);
    const plan::Task* from = producer(p, sink->inputs()->Get(i));
    CHECK(from->kind() == TaskKind::Compute);
    CHECK(from->node() == rank / 2);
    CHECK(from->device() == rank % 2);
    CHECK(from->name()->str() == fmt::format("{}@{}", i < 4 ? "mean" : "acc", rank));
  }
  check_locality(p);

  auto sources = tasks_of_kind(p, TaskKind::Source);
  REQUIRE(sources.size() == 4);
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(sources[rank]->node() == rank / 2);
    // Rows by node, then by device within the node's rows.
    CHECK(sources[rank]->source()->shard() == rank / 2);
    CHECK(sources[rank]->source()->num_shards() == 2);
    CHECK(sources[rank]->source()->sub_shard() == rank % 2);
    CHECK(sources[rank]->source()->num_sub_shards() == 2);
  }
}

TEST_CASE("B -> S across nodes is a local slice: a task per node, no peers; one node keeps one task") {
  // x and y read whole, then split by a hinted relu: B -> S(0) boxings; w's gradient P -> B.
  graph::Job job = testing::linear_regression_job();
  job.inputs[0].sbp = Sbp::broadcast();
  job.inputs[1].sbp = Sbp::broadcast();
  job.ops.insert(job.ops.begin(), graph::Op{"act", "relu", {"x"}, {"xr"}, {}, {Sbp::split(0)}});
  job.ops[1].inputs[0] = "xr";
  const std::string bytes = compile_ok(job, "cpu:1", {}, 2);
  const plan::Plan& p = *plan_of(bytes);
  auto boxings = tasks_of_kind(p, TaskKind::Boxing);
  REQUIRE(boxings.size() == 6);
  std::set<int64_t> tags;
  int slices = 0;
  for (const plan::Task* box : boxings) {
    const plan::BoxingConf* conf = box->boxing();
    CHECK(conf->num_nodes() == 2);
    CHECK(conf->local_pieces() == 1);
    tags.insert(conf->collective_tag());
    REQUIRE(box->inputs()->size() == 1);
    CHECK(producer(p, box->inputs()->Get(0))->node() == box->node());
    if (sbp_string(conf->in_sbp()) == "B") {
      ++slices;
      CHECK(sbp_string(conf->out_sbp()) == "S(0)");
      CHECK(conf->peers()->size() == 0);
      CHECK(producer(p, box->inputs()->Get(0))->kind() == TaskKind::Source);
    } else {
      CHECK(sbp_string(conf->in_sbp()) == "P");
      CHECK(conf->peers()->size() == 2);
    }
  }
  CHECK(slices == 4);
  CHECK(tags.size() == 3);
  check_locality(p);

  // On one node a boxing to B is one task over every piece, on comm thread 0
  // (here the gather after the device threads' shared sum).
  const std::string one = compile_ok(testing::linear_regression_job(), "cpu:2");
  std::vector<const plan::Task*> single;
  for (const plan::Task* t : tasks_of_kind(*plan_of(one), TaskKind::Boxing))
    if (t->boxing()->piece() < 0) single.push_back(t);
  REQUIRE(single.size() == 1);
  const plan::BoxingConf* conf = single[0]->boxing();
  CHECK(ActorId::device(single[0]->id()) == 0);
  CHECK(conf->num_nodes() == 1);
  CHECK(conf->node() == 0);
  CHECK(conf->local_pieces() == 2);
  CHECK(conf->first_rank() == 0);
  CHECK(conf->collective_tag() == 0);
  CHECK(conf->peers()->size() == 0);
  CHECK(tasks_of_kind(*plan_of(one), TaskKind::Send).empty());
}

TEST_CASE("a split variable compiles across nodes: its gradient's P -> S(0) is a collective among the nodes") {
  graph::Job split = testing::linear_regression_job();
  split.variables[0].sbp = Sbp::split(0);  // its gradient needs P -> S(0), a reduce-scatter
  const std::string bytes = compile_ok(split, "cpu:1", {}, 2);
  int reduce_scatters = 0;
  for (const plan::Task* t : tasks_of_kind(*plan_of(bytes), TaskKind::Boxing)) {
    const plan::BoxingConf* conf = t->boxing();
    if (sbp_string(conf->in_sbp()) != "P" || sbp_string(conf->out_sbp()).rfind("S(", 0) != 0) continue;
    ++reduce_scatters;
    CHECK(conf->num_nodes() == 2);
    CHECK(conf->peers()->size() == 2);
    CHECK(conf->collective_tag() > 0);
  }
  CHECK(reduce_scatters == 2);  // one task per node
}

TEST_CASE("multi-node plans are deterministic and differ from one-node plans") {
  for (const char* devices : {"cpu:1", "cpu:2"}) {
    const std::string a = compile_ok(testing::mlp_job(12, 6), devices, {}, 2);
    const std::string b = compile_ok(testing::mlp_job(12, 6), devices, {}, 2);
    CHECK(a == b);
    for (int node = 0; node < 2; ++node) {
      auto na = compiler::node_plan(a, node);
      auto nb = compiler::node_plan(b, node);
      REQUIRE(na.ok());
      REQUIRE(nb.ok());
      CHECK(*na == *nb);
    }
  }
  CHECK(compile_ok(testing::mlp_job(), "cpu:1", {}, 2) != compile_ok(testing::mlp_job(), "cpu:2"));
}

TEST_CASE("rill plan names each boxing's collective and the bytes it sends per step") {
  graph::Job job = testing::mlp_job(12, 6);
  for (graph::Variable& v : job.variables)
    if (v.name == "w1") v.sbp = Sbp::split(1);
    else if (v.name == "w2") v.sbp = Sbp::split(0);
  const std::string bytes = compile_ok(job, "cpu:1", {}, 2);
  const nlohmann::json json = nlohmann::json::parse(compiler::plan_json(*plan_of(bytes)));
  std::set<std::string> kinds;
  for (const auto& task : json["tasks"]) {
    if (task["kind"] != "Boxing") continue;
    const auto& box = task["boxing"];
    const std::string kind = box["collective"];
    kinds.insert(kind);
    const int64_t logical = box["logical_bytes"], sent = box["bytes_sent_per_step"];
    CHECK(logical > 0);
    if (kind == "local") CHECK(sent == 0);
    if (kind == "all_reduce") CHECK(sent == logical);                          // 2 (N-1)/N, N = 2
    if (kind == "all_gather" || kind == "reduce_scatter") CHECK(sent == logical / 2);
  }
  CHECK(kinds.count("reduce_scatter") == 1);  // the split weights' gradients
  CHECK(kinds.size() >= 3);
}

TEST_CASE("hundreds of cross-node boxings share 4 comm threads per node, chained in one order on every node") {
  // 330 layers: 661 variables, so 661 gradient boxings on each of 16 nodes
  // (more than the 256 threads one node could give them one each).
  graph::Job job = testing::deep_mlp_job(330, 32, 16);
  job.train.bucket_bytes = 0;  // one boxing per gradient
  const std::string bytes = compile_ok(job, "cpu:1", {}, 16);
  const plan::Plan& p = *plan_of(bytes);
  std::map<std::pair<int, uint32_t>, int> per_thread;
  for (const plan::Task* t : tasks_of_kind(p, TaskKind::Boxing)) {
    CHECK(ActorId::device(t->id()) < 4);
    ++per_thread[{t->node(), ActorId::device(t->id())}];
  }
  CHECK(per_thread.size() == 16 * 4);
  // Every task but the first on a thread reads a control regst from the one
  // before it, made on the same node and thread.
  int controlled = 0;
  for (const plan::Task* t : tasks_of_kind(p, TaskKind::Boxing))
    for (uint32_t k = t->boxing()->local_pieces(); k < t->inputs()->size(); ++k) {
      const plan::Task* before = producer(p, t->inputs()->Get(k));
      CHECK(before->kind() == TaskKind::Boxing);
      CHECK(before->node() == t->node());
      CHECK(ActorId::device(before->id()) == ActorId::device(t->id()));
      CHECK(regst(p, t->inputs()->Get(k))->register_num() == 1);
      ++controlled;
    }
  // k - 1 links per chain of k, plus the last's read of the first's.
  int want = 0;
  for (const auto& [where, k] : per_thread) want += (k - 1) + (k > 2 ? 1 : 0);
  CHECK(controlled == want);
}

TEST_CASE("small gradients' all-reduces across nodes share buckets of at most bucket_bytes") {
  // 330 layers of width 8: 661 gradients of 32 to 256 bytes each.
  for (int64_t cap : {int64_t{1} << 20, int64_t{4096}}) {
    CAPTURE(cap);
    graph::Job job = testing::deep_mlp_job(330, 32, 16);
    job.train.bucket_bytes = cap;
    const std::string bytes = compile_ok(job, "cpu:2", {}, 2);
    const plan::Plan& p = *plan_of(bytes);
    std::set<std::string> fed;  // variables whose gradient a bucket delivers
    int tensors = 0, tasks = 0;
    for (const plan::Task* t : tasks_of_kind(p, TaskKind::Boxing)) {
      if (t->node() != 0) continue;
      ++tasks;
      const plan::BoxingConf* conf = t->boxing();
      tensors += conf->tensors();
      CHECK(sbp_string(conf->in_sbp()) == "P");
      CHECK(sbp_string(conf->out_sbp()) == "B");
      // Inputs tensor-major (2 pieces each), one B output per tensor.
      REQUIRE(t->inputs()->size() >= static_cast<uint32_t>(2 * conf->tensors()));
      REQUIRE(t->outputs()->size() >= static_cast<uint32_t>(conf->tensors()));
      int64_t bytes_in_bucket = 0;
      for (int k = 0; k < conf->tensors(); ++k) {
        const plan::RegstDesc* in = regst(p, t->inputs()->Get(static_cast<uint32_t>(2 * k)));
        const plan::RegstDesc* twin = regst(p, t->inputs()->Get(static_cast<uint32_t>(2 * k + 1)));
        const plan::RegstDesc* out = regst(p, t->outputs()->Get(static_cast<uint32_t>(k)));
        CHECK(in->name()->str() == twin->name()->str());
        CHECK(in->name()->str() == out->name()->str());
        bytes_in_bucket += out->bytes();
        for (uint64_t consumer : *out->consumers()) {
          const plan::Task* var = task(p, consumer);
          CHECK(var->kind() == TaskKind::Variable);
          fed.insert(var->name()->str().substr(0, var->name()->str().find('@')));
        }
      }
      CHECK(bytes_in_bucket <= cap);
    }
    CHECK(tensors == 661);
    CHECK(fed.size() == 661);
    // 661 gradients of about 160 KB in all: one bucket, or one per 4 KB.
    if (cap == int64_t{1} << 20) CHECK(tasks == 1);
    else CHECK(tasks > 661 / 40);
  }
}

// The MLP sample's gradients in the order the backward makes them: b3 and
// w3 (20 KB), b2, w2 (1 MiB), then b1 and w1 (1.6 MB). The first bucket
// closes once it holds 1 MiB (kFirstBucketBytes, as DDP's), after w2, so
// its all-reduce runs while the backward makes w1's gradient; the rest
// share the second, far under the default 25 MiB.
TEST_CASE("the first gradient bucket closes at 1 MiB, as DDP's, and the rest fill buckets of bucket_bytes") {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  auto job = graph::load_job_file(std::string(root ? root : ".") + "/samples/mlp/mlp.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  const std::string bytes = compile_ok(*job, "cpu:1", {}, 2);
  const plan::Plan& p = *plan_of(bytes);
  std::vector<std::pair<int, int64_t>> buckets;  // tensors, bytes; in comm order
  for (const plan::Task* t : tasks_of_kind(p, TaskKind::Boxing)) {
    if (t->node() != 0 || t->boxing()->num_nodes() < 2) continue;
    int64_t held = 0;
    for (int k = 0; k < t->boxing()->tensors(); ++k) held += regst(p, t->outputs()->Get(static_cast<uint32_t>(k)))->bytes();
    buckets.emplace_back(t->boxing()->tensors(), held);
  }
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[0] == std::pair<int, int64_t>{4, (512 * 512 + 512 + 512 * 10 + 10) * 4});
  CHECK(buckets[1] == std::pair<int, int64_t>{2, (784 * 512 + 512) * 4});
}

}  // namespace
}  // namespace rill
