// The GPT sample's plans: data parallel across nodes with one bucket of
// gradients and no gathered activations; tensor parallel (Megatron) with the
// heads split, and a device count that does not divide the heads refused,
// naming the reshape that would cut a head; the 2-D hybrid of the two.
#include <doctest/doctest.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "graph/job_file.h"
#include "tests/compiler/test_jobs.h"

namespace rill {
namespace {

using testing::gpt_sample;

int boxings_named(const plan::Plan& p, const std::string& part) {
  int n = 0;
  for (const plan::Task* t : testing::tasks_of_kind(p, plan::TaskKind::Boxing)) n += t->name()->str().find(part) != std::string::npos;
  return n;
}

TEST_CASE("GPT data parallel on 2 nodes: every gradient in two all-reduce buckets, no activation gathered") {
  const std::string bytes = testing::compile_ok(gpt_sample("gpt_moby.json"), "cpu:1", {}, 2);
  const plan::Plan& p = *testing::plan_of(bytes);
  // With clipping on (the sample's 1.0) too: the gradients are summed as
  // their variables lie (B) before their squares are, so the square sums
  // need no reduction of their own. Its 3.3 MB of gradients are two
  // buckets (the first closes at 1 MiB, compiler/boxing_units.h), a task
  // each per node; nothing else crosses.
  CHECK(boxings_named(p, "bucket:") == 4);
  CHECK(testing::tasks_of_kind(p, plan::TaskKind::Boxing).size() == 4);
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

// Text is sampled from byte logits after training: generate.logits naming a
// tensor of another shape is refused as the job compiles, before any step.
TEST_CASE("generate.logits must be the byte model's [batch, context, 256] logits") {
  auto cluster = compiler::parse_devices("cpu:1", 1);
  REQUIRE(cluster.ok());
  graph::Job job = gpt_sample("gpt_moby.json");
  REQUIRE(job.generate);
  CHECK(compiler::compile(job, *cluster, {}).ok());
  job.generate->logits = "lnf";  // the final layer norm: [16, 128, 128]
  auto wrong = compiler::compile(job, *cluster, {});
  REQUIRE_FALSE(wrong.ok());
  INFO(wrong.status().message());
  CHECK(wrong.status().message().find("generate.logits: 'lnf' is f32 [16, 128, 128]; text is sampled from a byte "
                                      "model's logits, f32 [batch, 128, 256]") != std::string::npos);
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

namespace rill {
namespace {

// A job file's block with "recompute": its layers' ops are one group each.
graph::Job with_recompute(const std::string& path) {
  const char* root = std::getenv("RILL_SOURCE_ROOT");
  std::ifstream in(std::string(root ? root : ".") + "/" + path);
  nlohmann::json text = nlohmann::json::parse(in);
  text["blocks"][0]["recompute"] = true;
  auto job = graph::parse_job_json(text.dump(), path);
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  return *job;
}

// Activation recompute (compiler/autograd.cc): a layer's values that its
// backward reads are made again there by clones of its ops, from copies
// of its inputs made once the gradient of its output has come; only what
// the layer hands on (its output) is kept for the backward.
TEST_CASE("recompute on a repeated block: the layers' backward reads clones, only their outputs are kept") {
  const graph::Job job = with_recompute("samples/gpt/gpt_moby.json");
  int grouped = 0;
  for (const graph::Op& op : job.ops)
    if (op.name.rfind("h2.", 0) == 0) {
      CHECK(op.recompute == "h.2");
      ++grouped;
    }
  CHECK(grouped > 10);
  const std::string bytes = testing::compile_ok(job, "cpu:1");
  const plan::Plan& p = *testing::plan_of(bytes);
  std::map<int64_t, std::string> producer;  // regst -> the task that writes it
  std::map<int64_t, std::vector<std::string>> readers;
  for (const plan::Task* t : *p.tasks()) {
    if (t->kind() == plan::TaskKind::Compute)  // a layer's ops, not its variables
      for (int64_t r : *t->outputs()) producer[r] = t->name()->str();
    for (int64_t r : *t->inputs()) readers[r].push_back(t->name()->str());
  }
  auto layer_of = [](const std::string& task) {  // "h2" for h2.<op>@0, "" elsewhere
    return task.size() > 2 && task[0] == 'h' && std::isdigit(static_cast<unsigned char>(task[1]))
               ? task.substr(0, task.find('.'))
               : std::string();
  };
  int clones = 0, depends = 0, internal = 0;
  for (const plan::Task* t : *p.tasks()) {
    const std::string name = t->name()->str();
    clones += name.rfind("recompute/h", 0) == 0 && name.find("/depend") == std::string::npos;
    depends += name.find("/depend") != std::string::npos;
  }
  for (const auto& [regst, task] : producer) {
    const std::string layer = layer_of(task);
    if (layer.empty()) continue;
    bool handed_on = false, backward = false;
    for (const std::string& reader : readers[regst]) {
      handed_on = handed_on || (reader.rfind("grad/", 0) != 0 && layer_of(reader) != layer);
      backward = backward || reader.rfind("grad/", 0) == 0;
    }
    if (handed_on) continue;  // the layer's output: kept
    ++internal;
    CAPTURE(task);
    CHECK_FALSE(backward);  // read again only through its clone
  }
  CHECK(internal > 4 * 10);
  CHECK(clones > 4 * 10);
  CHECK(depends >= 4);  // each layer's input (and position table) copied after its output's gradient
}

// What it saves on GPT-2 124M (12 layers, context 1024), planned by
// lifetime: 26.7 GB of device memory without, 19.0 GB with. (The GPT
// sample's 4 short layers save nothing: there the backward's own working
// set, unordered by the protocol, is the peak.)
TEST_CASE("recompute lowers GPT-2 124M's planned device memory") {
  auto cluster = compiler::parse_devices("cuda:1", 1);
  REQUIRE(cluster.ok());
  int64_t planned[2] = {0, 0};
  for (int re = 0; re < 2; ++re) {
    const char* root = std::getenv("RILL_SOURCE_ROOT");
    graph::Job job = re ? with_recompute("bench/gpt2_124m.json")
                        : *graph::load_job_file(std::string(root ? root : ".") + "/bench/gpt2_124m.json");
    auto bytes = compiler::compile(job, *cluster, {});
    REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
    const plan::Plan& p = *plan::GetPlan(bytes->data());
    auto memory = compiler::plan_memory(p, 0);
    REQUIRE(memory.ok());
    REQUIRE(compiler::check_memory_plan(p, 0, *memory).ok());
    for (const compiler::MemoryBlock& b : memory->blocks)
      if (b.zone.kind == compiler::MemoryZone::kDevice) planned[re] = b.slot_bytes;
  }
  CHECK(planned[0] > 25'000'000'000);
  CHECK(planned[1] < 0.75 * static_cast<double>(planned[0]));
}

// train.zero on GPUs across nodes (GPT-2 124M, 2 nodes x cuda:1): each
// device holds half the AdamW moments and updates half the rows; every
// weight is read whole (gathered once a step), so the tied embedding's
// logits stay split by the batch, as without zero, not by the vocabulary.
// The plan says what it saves: the device block (slots, then optimizer
// state) is smaller by at least the moments' half, 475 MB.
TEST_CASE("train.zero on 2 nodes x cuda:1: GPT-2 124M's optimizer state halves and its device block shrinks") {
  auto cluster = compiler::parse_devices("cuda:1", 2);
  REQUIRE(cluster.ok());
  int64_t state[2] = {0, 0}, block[2] = {0, 0};
  for (int zero = 0; zero < 2; ++zero) {
    const char* root = std::getenv("RILL_SOURCE_ROOT");
    graph::Job job = *graph::load_job_file(std::string(root ? root : ".") + "/bench/gpt2_124m.json");
    job.train.zero = zero == 1;
    compiler::CompileOptions options;
    options.node = 0;
    auto bytes = compiler::compile(job, *cluster, options);
    REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
    const plan::Plan& p = *plan::GetPlan(bytes->data());
    auto memory = compiler::plan_memory(p, 0);
    REQUIRE(memory.ok());
    for (const compiler::MemoryBlock& b : memory->blocks)
      if (b.zone.kind == compiler::MemoryZone::kDevice) {
        state[zero] = b.state_bytes;
        block[zero] = b.block_bytes();
      }
    const plan::Task* logits = testing::task_named(p, "logits@0");
    REQUIRE(logits != nullptr);
    CHECK(testing::regst(p, logits->outputs()->Get(0))->shape()->Get(0) == 8);  // half the batch of 16
    CHECK(testing::regst(p, logits->outputs()->Get(0))->shape()->Get(2) == 50304);
  }
  MESSAGE("device block without zero " << block[0] << " bytes, with " << block[1]);
  CHECK(state[1] * 2 == state[0]);
  CHECK(block[0] - block[1] >= state[0] / 2);
}

}  // namespace
}  // namespace rill
