#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "graph/job_check.h"
#include "graph/placement.h"
#include "kernels/op.h"
#include "samples/linear_regression/linear_regression_job.h"
#include "samples/mlp/mlp_job.h"

namespace rill::graph {
namespace {

// The messages of every issue found, one string for substring checks.
std::string issues_of(const Job& job) {
  std::string all;
  for (const JobIssue& issue : find_job_issues(job)) all += issue.path + " | " + issue.message + "\n";
  return all;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("the sample jobs pass the checker") {
  CHECK(check_job(samples::make_mlp_job()).ok());
  CHECK(check_job(samples::make_linear_regression_job()).ok());
}

TEST_CASE("checker messages name the element and the field path") {
  Job job = samples::make_mlp_job();
  job.ops[3].type = "matmull";
  std::string issues = issues_of(job);
  CHECK(has(issues, "ops[3].type | ops[3] (fc2): unknown op type 'matmull' (did you mean 'matmul'?)"));
  // Its output is still defined, so nothing downstream is reported.
  CHECK(std::count(issues.begin(), issues.end(), '\n') == 1);
  // Another case of a known name is suggested, however far in letters.
  job.ops[3].type = "MatMul";
  CHECK(has(issues_of(job), "unknown op type 'MatMul' (did you mean 'matmul'?)"));

  job = samples::make_mlp_job();
  job.ops[3].inputs[0] = "h9";
  CHECK(has(issues_of(job), "ops[3].inputs | ops[3] (fc2): input 'h9' is not defined (did you mean 'h1'?) "
                            "(known: x, y, w1, b1, w2, b2, w3, b3, ...)"));

  job = samples::make_mlp_job();
  std::swap(job.ops[0], job.ops[1]);
  CHECK(has(issues_of(job), "ops[0] (fc1_bias): input 'fc1' is produced by ops[1] (fc1), which is not listed before"));
}

TEST_CASE("shape errors come from the ops' own inference") {
  Job job = samples::make_mlp_job();
  job.variables[2].shape = {256, 512};  // w2 no longer fits h1 [256, 512]
  std::string issues = issues_of(job);
  CHECK(has(issues, "ops[3] (fc2): op 'matmul'"));
  // The init is inferred from the variable's own shape, so only the op is wrong.
  CHECK(std::count(issues.begin(), issues.end(), '\n') == 1);
}

TEST_CASE("shapes are inferred with the eval batch too") {
  Job job = samples::make_mlp_job();
  // A reshape that spells out the training batch fits training only.
  Op flat{"flat", "reshape", {"x"}, {"flat"}, {{"shape", std::vector<int64_t>{256, 784}}}, {}};
  job.ops.insert(job.ops.begin(), flat);
  job.ops[1].inputs[0] = "flat";
  std::string issues = issues_of(job);
  CHECK(has(issues, "with eval.batch_size 500: ops[0] (flat): op 'reshape': attr 'shape' = [256, 784]"));
  job.ops[0].attrs.set("shape", std::vector<int64_t>{-1, 784});
  CHECK(check_job(job).ok());
}

TEST_CASE("check_job lists every issue, one per line") {
  Job job = samples::make_mlp_job();
  job.name = "";
  job.train.batch_size = 0;
  Status s = check_job(job);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message() == "name: the job has no name\ntrain.batch_size must be > 0, got 0");
}

// Checkpoints keep compressed gradients' carried state under
// "compression/": a variable there would be taken for it on resume.
TEST_CASE("a variable's name may not start with the carried state's prefix") {
  Job job = samples::make_mlp_job();
  job.variables[0].name = "compression/w1";
  CHECK(has(issues_of(job), "may not start with 'compression/'"));
}

TEST_CASE("the loss and metrics must be defined scalars, reported once") {
  Job job = samples::make_mlp_job();
  job.loss = "xent";
  CHECK(has(issues_of(job), "loss: tensor 'xent' has shape [256], expected a scalar"));
  job.loss = "";
  CHECK(has(issues_of(job), "loss: the job has no loss"));
  job = samples::make_mlp_job();
  job.metrics.push_back({"loss", "acc"});
  job.metrics.push_back({"logits", "logits"});
  job.metrics.push_back({"acc2", "loss"});
  std::string issues = issues_of(job);
  CHECK(has(issues, "metrics[1] (loss): the name 'loss' is already reported (it is reserved for the loss)"));
  CHECK(has(issues, "metrics[1] (loss): tensor 'acc' is already reported"));
  CHECK(has(issues, "metrics[2] (logits): tensor 'logits' has shape [256, 10], expected a scalar"));
  CHECK(has(issues, "metrics[3] (acc2): tensor 'loss' is already reported as the loss"));
}

TEST_CASE("names are unique across inputs, variables and op outputs") {
  Job job = samples::make_mlp_job();
  job.variables[1].name = "x";
  job.ops[2].outputs = {"fc1"};
  job.ops[4].name = "fc2";
  std::string issues = issues_of(job);
  CHECK(has(issues, "variables[1] (x): tensor name 'x' is already defined by inputs[0] (x)"));
  CHECK(has(issues, "ops[2] (h1): tensor name 'fc1' is already defined by ops[0] (fc1)"));
  CHECK(has(issues, "ops[4] (fc2): op name 'fc2' is used twice"));
}

TEST_CASE("datasets and inputs are checked against what each kind offers") {
  Job job = samples::make_mlp_job();
  job.inputs[0].field = "images";
  job.inputs[1].dtype = DType::kF32;
  job.datasets[1].labels = "";
  std::string issues = issues_of(job);
  CHECK(has(issues, "inputs[0] (x): dataset 'train' (idx) has no field 'images' (did you mean 'image'?); its "
                    "fields are: image, label"));
  CHECK(has(issues, "inputs[1] (y): field 'label' of dataset 'train' is i32, but the input is f32"));
  CHECK(has(issues, "datasets[1] (test): an idx dataset needs 'labels'"));

  job = samples::make_linear_regression_job();
  job.inputs[0].shape = {3};
  job.datasets[0].tensors[1].f32.pop_back();
  issues = issues_of(job);
  CHECK(has(issues, "inputs[0] (x): shape [3] does not match field 'x' of dataset 'data' ([2] per sample)"));
  CHECK(has(issues, "datasets[0] (data): tensors[1] (y): shape [4, 1] needs 4 values, found 3"));
  job = samples::make_linear_regression_job();
  job.train.batch_size = 8;
  CHECK(has(issues_of(job), "train.batch_size 8 is larger than dataset 'data' (4 samples)"));
  // A field the kind does not read points at the wrong kind, named with
  // the kinds that read it; the field's path leads to its line.
  job = samples::make_mlp_job();
  job.datasets[0].path = "/data/train.csv";
  job.datasets[0].context = 5;
  issues = issues_of(job);
  CHECK(has(issues, "datasets[0].path | datasets[0] (train): 'path' is not read by idx datasets; csv, text, tokens "
                    "datasets read it (is the kind right?)"));
  CHECK(has(issues, "datasets[0].context | datasets[0] (train): 'context' is not read by idx datasets"));
}

TEST_CASE("variables: initializer, its shape, dtype and SBP") {
  Job job = samples::make_mlp_job();
  job.variables[0].init.type = "relu";
  job.variables[2].init.attrs.set("shape", std::vector<int64_t>{512, 256});
  job.variables[4].sbp = Sbp::partial_sum();
  job.variables[5].sbp = Sbp::split(1);
  std::string issues = issues_of(job);
  CHECK(has(issues, "variables[0] (w1): unknown initializer 'relu' (known: fill, uniform, normal, xavier_uniform"));
  CHECK(has(issues, "variables[2] (w2): init shape [512, 256] does not match the variable's shape [512, 512]"));
  CHECK(has(issues, "variables[4] (w3): SBP P is not allowed for a variable"));
  CHECK(has(issues, "variables[5] (b3): SBP S(1) splits an axis the tensor [10] lacks"));

  job = samples::make_mlp_job();
  job.variables[0].shape = {4, 4, 4};  // xavier needs 1-D or 2-D; matmul too
  CHECK(has(issues_of(job), "variables[0] (w1): init: "));
}

TEST_CASE("optimizer, train and eval settings") {
  Job job = samples::make_mlp_job();
  job.optimizer.type = "adamx";
  job.optimizer.lr = 0;
  job.optimizer.warmup_steps = 5;
  job.optimizer.decay_steps = 4;
  job.optimizer.min_lr = -1;
  job.train.devices = "gpu:2";
  job.train.log_every = 0;
  job.train.bucket_bytes = -1;
  job.fetch = {"logits", "logit", "logits"};
  job.eval->dataset = "tset";
  std::string issues = issues_of(job);
  CHECK(has(issues, "optimizer: unknown type 'adamx' (did you mean 'adam'?)"));
  CHECK(has(issues, "optimizer.decay_steps 4 must be past warmup_steps 5 (or 0: no decay)"));
  CHECK_FALSE(has(issues, "optimizer.min_lr"));  // against a bad lr: the lr is the one mistake, said once
  Job low = samples::make_mlp_job();
  low.optimizer.lr = 0.5;
  low.optimizer.min_lr = -1;
  CHECK(has(issues_of(low), "optimizer.min_lr must be in [0, lr = 0.5], got -1"));
  CHECK(has(issues, "optimizer.lr must be a finite number > 0, got 0"));
  CHECK(has(issues, "train.devices 'gpu:2': unknown device type 'gpu' (expected cpu:N or cuda:N)"));
  CHECK(has(issues, "train.log_every must be > 0, got 0"));
  CHECK(has(issues, "train.bucket_bytes must be in [0, 2^40], got -1"));
  Job by_link = samples::make_mlp_job();
  by_link.train.buckets_by_link = true;
  CHECK_FALSE(has(issues_of(by_link), "train.buckets_by_link"));
  by_link.train.bucket_bytes = 0;
  CHECK(has(issues_of(by_link), "train.buckets_by_link sizes buckets below train.bucket_bytes, which is 0"));
  CHECK(has(issues, "fetch[1]: tensor 'logit' is not defined (did you mean 'logits'?)"));
  CHECK(has(issues, "fetch[2]: tensor 'logits' is fetched twice"));
  CHECK(has(issues, "eval: unknown dataset 'tset' (did you mean 'test'?) (known: train, test)"));

  job = samples::make_mlp_job();
  job.train.devices = "cpu:8";
  job.train.batch_size = 4;
  job.eval->batch_size = -1;
  issues = issues_of(job);
  CHECK(has(issues, "train.batch_size 4 is smaller than the 8 devices it is split over"));
  CHECK(has(issues, "eval.batch_size must be > 0, got -1"));

  job = samples::make_mlp_job();  // batch 256 on cpu:1
  job.train.micro_batches = 0;
  CHECK(has(issues_of(job), "train.micro_batches must be > 0, got 0"));
  job.train.micro_batches = 3;
  CHECK(has(issues_of(job), "train.micro_batches 3 does not divide train.batch_size 256"));
  job.train.micro_batches = 64;
  job.train.devices = "cpu:8";
  CHECK(has(issues_of(job), "a micro-batch of 4 rows (train.batch_size 256 / train.micro_batches 64) is smaller "
                            "than the 8 devices it is split over"));
}

TEST_CASE("train.compression_rank: 1 to 64; train.compression_start_step: not negative") {
  Job job = samples::make_mlp_job();
  job.train.compression = Compression::kPowerSGD;
  CHECK(issues_of(job).empty());
  for (int64_t bad : {int64_t{0}, int64_t{-3}, int64_t{65}}) {
    CAPTURE(bad);
    job.train.compression_rank = bad;
    CHECK(has(issues_of(job), fmt::format("train.compression_rank must be in [1, 64], got {}", bad)));
  }
  job.train.compression_rank = 8;
  job.train.compression_start_step = -1;
  CHECK(has(issues_of(job), "train.compression_start_step must be in [0, "));
}

TEST_CASE("train.precision and loss scaling: a scale that is no power of two, a window, a view without one gradient set") {
  Job job = samples::make_mlp_job();
  job.train.precision = Precision::kF16;
  CHECK(issues_of(job).empty());
  std::string issues;
  for (double bad : {3.0, 0.5, -4.0, 1e300}) {
    CAPTURE(bad);
    job.train.loss_scale = bad;
    CHECK(has(issues_of(job), "train.loss_scale | train.loss_scale must be a power of two from 1 to 2^127"));
  }
  job.train.loss_scale = 1;
  job.train.loss_scale_window = 0;
  CHECK(has(issues_of(job), "train.loss_scale_window must be in [1, 2^24], got 0"));
  job.train.loss_scale_window = (int64_t{1} << 24) + 3;  // its good steps, counted in f32, would never reach it
  CHECK(has(issues_of(job), "train.loss_scale_window must be in [1, 2^24], got 16777219"));
  job.train.loss_scale_window = 2000;
  job.train.loss_scale = 0;
  job.train.view = View::kMirrored;  // every rank holds the averaged gradients: one view of them
  job.optimizer.clip_grad_norm = 1;
  CHECK(issues_of(job).empty());
  job.train.view = View::kConsistent;
  job.distributed = Distributed{};
  job.distributed->pservers = {"0"};
  issues = issues_of(job);
  CHECK(has(issues, "train.precision | loss scaling (train.precision \"f16\" or train.loss_scale) skips a step for "
                    "every gradient at once; parameter-server mode has no one view of them"));
  CHECK(has(issues, "optimizer.clip_grad_norm: clipping by the global norm needs every gradient in one view"));
  job.train.precision = Precision::kBF16;  // no scaling: a pserver bf16 job is fine
  CHECK(!has(issues_of(job), "loss scaling"));
}

TEST_CASE("the job checker reads devices with the one parser: cuda:N where the build has CUDA, else refused with why") {
  auto job = samples::make_mlp_job();
  job.train.devices = "cuda:1";
#ifdef RILL_WITH_CUDA
  CHECK(issues_of(job).find("train.devices") == std::string::npos);
#else
  CHECK(has(issues_of(job), "train.devices 'cuda:1': this build of Rill has no CUDA support"));
#endif
}

TEST_CASE("the checker survives randomly damaged jobs") {
  std::mt19937_64 rng(12345);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  const std::vector<int64_t> dims = {-5, -1, 0, 1, 2, 3, 10, 256, 512, 784, int64_t{1} << 40, INT64_MAX, INT64_MIN};
  auto random_shape = [&] {
    Shape s(pick(5));
    for (int64_t& d : s) d = dims[pick(dims.size())];
    return s;
  };
  auto random_value = [&]() -> AttrValue {
    switch (pick(4)) {
      case 0: return dims[pick(dims.size())];
      case 1: return std::vector<double>{-1e300, -1.0, 0.0, 0.5, 1e300, NAN}[pick(6)];
      case 2: return std::string(pick(2) ? "sum" : "bogus");
      default: return random_shape();
    }
  };
  const char* attr_names[] = {"transpose_a", "transpose_b", "axis", "axes",  "keepdims", "reduction",
                              "shape",       "perm",        "starts", "ends", "value",    "low",
                              "high",        "mean",        "std",  "seed",  "scale",    "dtype"};
  auto ops = all_ops();
  for (int round = 0; round < 3000; ++round) {
    Job job = round % 2 ? samples::make_mlp_job() : samples::make_linear_regression_job();
    for (int m = 0, n = 1 + static_cast<int>(pick(4)); m < n; ++m) {
      switch (pick(8)) {
        case 0: if (!job.inputs.empty()) job.inputs[pick(job.inputs.size())].shape = random_shape(); break;
        case 1: if (!job.variables.empty()) job.variables[pick(job.variables.size())].shape = random_shape(); break;
        case 2: {
          Op& op = job.ops[pick(job.ops.size())];
          op.attrs.set(attr_names[pick(std::size(attr_names))], random_value());
          break;
        }
        case 3: job.ops[pick(job.ops.size())].type = ops[pick(ops.size())]->type; break;
        case 4: {
          Op& op = job.ops[pick(job.ops.size())];
          if (pick(2) && !op.inputs.empty()) op.inputs.pop_back();
          else op.inputs.push_back(job.ops[pick(job.ops.size())].outputs.at(0));
          break;
        }
        case 5: {
          Variable& v = job.variables[pick(job.variables.size())];
          v.init.type = ops[pick(ops.size())]->type;
          v.init.attrs.set(attr_names[pick(std::size(attr_names))], random_value());
          break;
        }
        case 6: job.train.batch_size = dims[pick(dims.size())]; break;
        default: if (!job.datasets.empty()) job.datasets[0].tensors.clear(); break;
      }
    }
    std::vector<JobIssue> issues = find_job_issues(job);
    for (const JobIssue& issue : issues) CHECK_FALSE(issue.message.empty());
  }
}

TEST_CASE("pipeline misconfigurations are errors before anything runs, each naming what and where") {
  // The MLP in two stages, as samples/mlp/mlp_pipeline.json.
  auto staged = [] {
    Job job = samples::make_mlp_job();
    job.train.devices = "cpu:2";
    job.train.micro_batches = 4;
    job.groups = {{"stage0", *parse_placement("cpu 0:0"), {"x", "w1", "b1", "fc1", "fc1_bias", "h1"}},
                  {"stage1", *parse_placement("cpu 0:1"),
                   {"y", "w2", "b2", "fc2", "fc2_bias", "h2", "w3", "b3", "fc3", "logits", "xent", "loss", "acc"}}};
    job.pipeline = Pipeline{{"stage0", "stage1"}, 0, "params"};
    return job;
  };
  CHECK(issues_of(staged()).empty());

  Job job = staged();  // an op on no stage
  job.groups[1].members.pop_back();
  CHECK(has(issues_of(job), "ops[10] (acc): op 'acc' is on no stage (pipeline.stages: stage0, stage1)"));
  job = staged();  // a variable on no stage
  job.groups[0].members.erase(job.groups[0].members.begin() + 1);
  CHECK(has(issues_of(job), "variables[0] (w1): variable 'w1' is on no stage"));
  job = staged();  // a stage on two placements: a member placed by the stage and by itself
  job.ops[3].placement = *parse_placement("cpu 0:0");
  CHECK(has(issues_of(job), "op 'fc2' is already placed by ops[3] (fc2)"));
  job = staged();  // a tensor used by an earlier stage than it is made on
  job.groups[0].members.erase(std::find(job.groups[0].members.begin(), job.groups[0].members.end(), "fc1_bias"));
  job.groups[1].members.push_back("fc1_bias");  // h1, on stage0, reads it
  CHECK(has(issues_of(job), "ops[2] (h1): on stage 'stage0' (0), it reads 'fc1_bias', made on the later stage "
                            "'stage1' (1); stages must follow the forward pass"));
  job = staged();  // a variable on a later stage than its reader
  job.groups[0].members.erase(std::find(job.groups[0].members.begin(), job.groups[0].members.end(), "w1"));
  job.groups[1].members.push_back("w1");
  CHECK(has(issues_of(job), "ops[0] (fc1): on stage 'stage0' (0), it reads 'w1', made on the later stage"));
  job = staged();  // stages that are not groups, or a group twice
  job.pipeline->stages = {"stage0", "stage_1", "stage0"};
  CHECK(has(issues_of(job), "pipeline.stages[1]: 'stage_1' is not a group of the job (did you mean 'stage1'?)"));
  CHECK(has(issues_of(job), "pipeline.stages[2]: group 'stage0' is a stage twice"));
  job = staged();  // stages without micro-batches take turns
  job.train.micro_batches = 1;
  CHECK(has(issues_of(job), "pipeline: 2 stages with train.micro_batches 1 take turns"));
  job = staged();  // both ways of giving stages, or neither
  job.pipeline->num_stages = 2;
  CHECK(has(issues_of(job), "pipeline: give stages (groups) or num_stages (the compiler cuts), not both"));
  job.pipeline->stages.clear();
  CHECK(has(issues_of(job), "pipeline.num_stages places every op itself; remove the groups"));
  job.pipeline->num_stages = 0;
  CHECK(has(issues_of(job), "pipeline: no stages"));
  job.pipeline->num_stages = 2;
  job.groups.clear();
  job.pipeline->balance = "memory";
  CHECK(has(issues_of(job), "pipeline.balance must be \"params\" or \"flops\", got \"memory\""));
  job.pipeline->balance = "flops";
  CHECK(issues_of(job).empty());
}

TEST_CASE("the mirrored view: hand placement, SBP, stages and ZeRO are errors naming what to drop") {
  auto mirrored = [] {
    Job job = samples::make_linear_regression_job();  // 4 rows
    job.train.view = View::kMirrored;
    job.train.batch_size = 2;
    job.train.devices = "cpu:2";
    return job;
  };
  CHECK(issues_of(mirrored()).empty());
  Job job = mirrored();
  job.inputs[0].sbp = NdSbp(Sbp::broadcast());
  CHECK(has(issues_of(job), "inputs[0] | inputs[0] (x) has an SBP or placement"));
  job = mirrored();
  job.variables[0].placement = *parse_placement("cpu 0:0");
  CHECK(has(issues_of(job), "variables[0] | variables[0] (w) has an SBP or placement"));
  job = mirrored();
  job.ops[0].output_sbp = {NdSbp(Sbp::split(0))};
  CHECK(has(issues_of(job), "ops[0] | ops[0] (y_pred) has an SBP or placement"));
  job = mirrored();
  job.train.zero = true;
  CHECK(has(issues_of(job), "train.zero splits the variables"));
  // Micro-batches cut each rank's own batch: 2 of its 2 rows are fine (one
  // row each), 3 do not divide them.
  job = mirrored();
  job.train.micro_batches = 2;
  CHECK(issues_of(job).empty());
  job.train.micro_batches = 3;
  CHECK(has(issues_of(job), "train.micro_batches 3 does not divide train.batch_size 2"));
  job = mirrored();
  job.groups = {{"g", *parse_placement("cpu 0:0"), {"w"}}};
  CHECK(has(issues_of(job), "groups | groups place ops by hand"));
  // batch_size is each rank's: 2 ranks x 3 rows do not fit in 4 samples.
  job = mirrored();
  job.train.batch_size = 3;
  CHECK(has(issues_of(job), "train.batch_size 3 on each of 2 devices is larger than dataset 'data' (4 samples)"));
}

TEST_CASE("collective ops: the mirrored view's only, their reduce checked, ranks and scale the compiler's") {
  Job job = samples::make_linear_regression_job();
  job.ops.push_back({"total", "all_reduce", {"loss"}, {"total"}, {}, {}, {}});
  CHECK(has(issues_of(job), "ops[2].type | ops[2] (total): 'all_reduce' is a collective of the mirrored view"));
  job.train.view = View::kMirrored;
  job.train.batch_size = 2;
  job.train.devices = "cpu:2";
  CHECK(issues_of(job).empty());
  job.ops[2].attrs.set("reduce", std::string("max"));
  CHECK(issues_of(job).empty());
  job.ops[2].attrs.set("reduce", std::string("median"));
  CHECK(has(issues_of(job), "reduce is 'median'; expected \"sum\", \"mean\", \"max\", \"min\" or \"prod\""));
  job.ops[2].attrs = Attrs{{"ranks", int64_t{4}}};
  CHECK(has(issues_of(job), "ops[2].attrs.ranks | ops[2] (total): attr 'ranks' of 'all_reduce' is the compiler's"));
  // Eval runs in the consistent view: a collective the loss or a metric
  // reads is refused there; one only fetched is not.
  job.ops[2].attrs = {};
  job.metrics = {{"total", "total"}};
  job.eval = Eval{"data", 4};
  CHECK(has(issues_of(job), "ops[2].type | ops[2] (total): 'all_reduce' feeds the loss or a metric, which eval"));
  job.metrics.clear();
  job.fetch = {"total"};
  CHECK(issues_of(job).empty());
  job.fetch.clear();
  job.eval.reset();
  // A gather's shape depends on the ranks: what reads it is checked when compiled.
  job.ops[2] = {"all_y", "all_gather", {"y"}, {"all_y"}, {}, {}, {}};
  job.ops.push_back({"twice", "add", {"all_y", "all_y"}, {"twice"}, {}, {}, {}});
  CHECK(issues_of(job).empty());
}

}  // namespace rill::graph

namespace rill::graph {

TEST_CASE("the distributed section: every setting checked, naming the field") {
  Job job = samples::make_mlp_job();
  job.distributed = Distributed{};
  job.distributed->pservers = {"0"};
  CHECK(check_job(job).ok());
  job.distributed->min_block_size = 0;
  job.distributed->enable_dc_asgd = true;
  job.distributed->rpc_deadline = -1;
  job.distributed->rpc_send_thread_num = 0;
  job.distributed->rpc_prefetch_thread_num = 65;
  job.variables[0].placement = parse_placement("cpu 0:0").value();
  std::string issues = issues_of(job);
  CHECK(has(issues, "distributed.min_block_size | distributed.min_block_size must be >= 1 element, got 0"));
  CHECK(has(issues, "distributed.enable_dc_asgd | distributed.enable_dc_asgd compensates the delay of asynchronous updates; set sync_mode false"));
  CHECK(has(issues, "distributed.rpc_deadline | distributed.rpc_deadline must be 1 to 604800000 ms (a week), got -1"));
  CHECK(has(issues, "distributed.rpc_send_thread_num | distributed.rpc_send_thread_num must be 1 to 64 threads, got 0"));
  CHECK(has(issues, "distributed.rpc_prefetch_thread_num | distributed.rpc_prefetch_thread_num must be 1 to 64 threads, got 65"));
  CHECK(has(issues, "variable 'w1': pserver mode places variables itself"));
  // Past a week: every wait's patience, and the time it ends, would overflow.
  job = samples::make_mlp_job();
  job.distributed = Distributed{};
  job.distributed->pservers = {"0"};
  job.distributed->rpc_deadline = std::numeric_limits<int64_t>::max();
  CHECK(has(issues_of(job), "distributed.rpc_deadline must be 1 to 604800000 ms (a week), got 9223372036854775807"));
  job = samples::make_mlp_job();
  job.distributed = Distributed{};
  job.distributed->pservers = {"0"};
  job.distributed->sync_mode = false;
  job.distributed->enable_dc_asgd = true;
  CHECK(check_job(job).ok());
  job.distributed->mode = DistMode::kNccl2;
  CHECK(has(issues_of(job), "distributed.pservers: mode \"nccl2\" has no pservers"));
  job.distributed->pservers.clear();
  CHECK(check_job(job).ok());
}

TEST_CASE("16-bit floats: a variable is refused in them, an op handed the wrong dtypes is named") {
  Job job = samples::make_mlp_job();
  job.variables[2].dtype = DType::kBF16;
  CHECK(has(issues_of(job), "variables[2].dtype | variables[2] (w2): a variable is f32 or i32, not bf16 (a cast op "
                            "makes bf16 and f16 values from it)"));
  // h1 cast to f16 feeds fc2's matmul beside an f32 weight.
  job = samples::make_mlp_job();
  Op cast{"h1.f16", "cast", {"h1"}, {"h1.f16"}, {}, {}, {}};
  cast.attrs.set("dtype", std::string("f16"));
  job.ops.insert(job.ops.begin() + 3, cast);
  job.ops[4].inputs[0] = "h1.f16";
  CHECK(has(issues_of(job), "ops[4] (fc2): op 'matmul': a and b must be both f32, both bf16 or both f16, got f16 and f32"));
}

}  // namespace rill::graph
