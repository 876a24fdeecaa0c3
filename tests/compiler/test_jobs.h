// Small jobs for compiler tests, built directly as graph::Job values, and
// helpers that look things up in a compiled plan. Test-only; single-threaded.
#pragma once

#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "graph/job.h"

namespace rill::testing {

// x [n, 3] and y [n, 1] inline; pred = matmul(x, w); loss = mse_loss(pred, y).
graph::Job linear_regression_job(int64_t num_samples = 8, int64_t batch = 4);
// x [n, 4] -> matmul w1 [4, 8] -> bias_add b1 -> relu -> matmul w2 [8, 3]
// -> sparse_softmax_cross_entropy with labels -> reduce_mean = loss; accuracy metric.
graph::Job mlp_job(int64_t num_samples = 8, int64_t batch = 4);
// mlp_job with `layers` hidden layers of width 8 (matmul, bias_add, relu
// each): 3 layers + 4 ops per layer, 2 variables per layer.
graph::Job deep_mlp_job(int layers, int64_t num_samples = 8, int64_t batch = 4);
// mlp_job's image through matmul w1, then `ops` identity ops one after
// another, then its loss (one variable: each identity's output is read by
// the next op alone; the backward passes the gradient through them). With `branches` > 1, each op of the chain is instead
// a block of that many identities of the previous value summed by adds (a
// ladder of diamonds, 2 * branches - 1 ops a block). bench/identity_chain.py
// writes the same as a job file.
graph::Job identity_chain_job(int ops, int branches = 1);

// samples/gpt/<file> as written (RILL_SOURCE_ROOT names the source tree).
graph::Job gpt_sample(const std::string& file);

// Compiles for `num_nodes` nodes of `devices` each and verifies; fails the
// current test on error. A whole plan of several nodes is also compiled node
// by node (check_nodes_compile_alone).
std::string compile_ok(const graph::Job& job, const std::string& devices,
                       const compiler::CompileOptions& options = {}, int num_nodes = 1);
const plan::Plan* plan_of(const std::string& bytes);
// The plan as FlatBuffers text, every field (by the plan's binary schema).
std::string plan_text(const std::string& bytes);
// Each node compiled alone gives a plan that verifies and, on CPU devices,
// equals the one cut from `whole` field for field.
void check_nodes_compile_alone(const graph::Job& job, const compiler::Cluster& cluster,
                               const compiler::CompileOptions& options, const std::string& whole);

std::vector<const plan::Task*> tasks_of_kind(const plan::Plan& plan, plan::TaskKind kind);
// Whether every reader of `r` is a variable (its update) or a boxing on r's
// node whose outputs are all read so: a gradient on its way to its update,
// which regst planning gives one slot.
bool read_only_by_updates(const plan::Plan& plan, const plan::RegstDesc& r);
// Whether regst planning gives `r` one slot whatever the activation count:
// a model, a gradient on its way to its update, or a regst made once a
// step by a task that acts after the step's updates (it reads a trained
// variable's model, directly or through tasks on its node).
bool one_slot(const plan::Plan& plan, const plan::RegstDesc& r);
std::vector<const plan::Task*> computes_of_type(const plan::Plan& plan, const std::string& op_type);
const plan::Task* task_named(const plan::Plan& plan, const std::string& name);
// By global id, in a whole or a node plan; fail the current test when absent.
const plan::RegstDesc* regst(const plan::Plan& plan, int64_t id);
const plan::Task* task(const plan::Plan& plan, uint64_t id);
const plan::Task* producer(const plan::Plan& plan, int64_t regst_id);
std::string sbp_string(const plan::NdSbp* sbp);

}  // namespace rill::testing
