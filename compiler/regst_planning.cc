#include "compiler/regst_planning.h"

#include <algorithm>

namespace rill::compiler {

int slots(const TaskGraph& g, const RegstNode& r, int activation_register_num) {
  const int k = r.readies_per_step;
  if (k <= 1) return activation_register_num;
  if (g.schedule == graph::Schedule::kGpipe) return std::max(activation_register_num, k);
  // 1F1B: the forward pass's tensors at stage s wait for their backward
  // while the S - s - 1 stages after it work on later micro-batches.
  if (r.stage < 0) return activation_register_num;
  return std::min(k, std::max(activation_register_num, g.stages - r.stage));
}

namespace {

// Whether every reader of regst `r` is a variable's update on its node, or a
// boxing on its node whose every output is such a regst: a gradient on its
// way to the update. Memoized by regst and by boxing task (-1 unknown, 0
// no, 1 yes): the gradients of a bucket share one boxing, whose outputs
// are looked at once, not once per gradient.
class UpdatesOnly {
 public:
  explicit UpdatesOnly(const TaskGraph& g) : g_(g), regsts_(g.regsts.size(), -1), boxings_(g.tasks.size(), -1) {}

  bool regst(int r) {
    int8_t& known = regsts_[static_cast<size_t>(r)];
    if (known >= 0) return known == 1;
    known = 0;  // a cycle (none in a plan) reads as no
    const RegstNode& regst = g_.regsts[static_cast<size_t>(r)];
    bool only = regst.producer >= 0 && !regst.consumers.empty();
    for (int c : regst.consumers) {
      if (!only) break;
      const TaskNode& t = g_.tasks[static_cast<size_t>(c)];
      only = t.node == regst.node && (t.is<BoxingInfo>() ? boxing(c) : t.is<VariableInfo>());
    }
    known = only ? 1 : 0;
    return only;
  }

 private:
  bool boxing(int task) {
    int8_t& known = boxings_[static_cast<size_t>(task)];
    if (known >= 0) return known == 1;
    known = 0;
    bool only = true;
    for (int out : g_.tasks[static_cast<size_t>(task)].outputs) only = only && regst(out);
    known = only ? 1 : 0;
    return only;
  }

  const TaskGraph& g_;
  std::vector<int8_t> regsts_, boxings_;
};

}  // namespace

Status plan_regsts(int activation_register_num, TaskGraph* g) {
  if (activation_register_num < 1)
    return invalid_argument("activation_register_num is {}, expected at least 1", activation_register_num);
  for (RegstNode& r : g->regsts) {
    r.consumers.clear();
    r.register_num = r.is_model || r.ctrl ? 1 : slots(*g, r, activation_register_num);
  }
  for (size_t t = 0; t < g->tasks.size(); ++t) {
    for (int regst : g->tasks[t].inputs) {
      if (regst < 0 || regst >= static_cast<int>(g->regsts.size()))
        return internal_error("task '{}' reads regst {} of {}", g->tasks[t].name, regst, g->regsts.size());
      g->regsts[regst].consumers.push_back(static_cast<int>(t));
    }
  }
  for (RegstNode& r : g->regsts) {
    std::sort(r.consumers.begin(), r.consumers.end());
    r.consumers.erase(std::unique(r.consumers.begin(), r.consumers.end()), r.consumers.end());
  }
  // A gradient read only on its way to its variable's update needs one
  // slot: its producer's next act is in the next step, whose forward needs
  // the model that update writes (one slot), so a second slot would never
  // be written before the first came back. Model-sized, so it matters.
  UpdatesOnly updates_only(*g);
  for (size_t r = 0; r < g->regsts.size(); ++r)
    if (g->regsts[r].register_num > 1 && updates_only.regst(static_cast<int>(r)))
      g->regsts[r].register_num = 1;
  // Made once a step from a trained variable's model (a forward activation
  // downstream of it, its gradients; LogicalTensor::after_updates, the same
  // on every node): its producer's next act waits for the next step's
  // model, which waits for the updates, which wait for this step's
  // backward, so a second slot would be written only once the readers of
  // the first are (nearly) done with it. One slot halves the activations'
  // memory (a transformer's are most of it); the inputs ahead of the model
  // keep theirs, to read the next batch while this one trains.
  for (RegstNode& r : g->regsts)
    if (r.register_num > 1 && r.readies_per_step <= 1 && !r.is_model && !r.ctrl && r.after_updates)
      r.register_num = 1;
  // The sink acts once per micro-batch, reading each metric's piece (and
  // each fetched tensor's). A metric made once a step (loss scaling's
  // skipped steps, made after the backward) is read from the step's first
  // act on, so then what it reads per micro-batch must all fit while that
  // metric is made, else their producers wait for the sink, the backward
  // for them, and the metric for the backward. A metric is a scalar; a
  // fetched activation costs its bytes once per micro-batch.
  for (const TaskNode& sink : g->tasks) {
    if (!sink.is<SinkInfo>()) continue;
    bool per_step = false;
    for (int in : sink.inputs) per_step = per_step || g->regsts[static_cast<size_t>(in)].readies_per_step == 1;
    if (!per_step || sink.acts_per_step <= 1) continue;
    for (int in : sink.inputs) {
      RegstNode& r = g->regsts[static_cast<size_t>(in)];
      if (r.readies_per_step > 1) r.register_num = std::max(r.register_num, static_cast<int>(r.readies_per_step));
    }
  }
  return {};
}

}  // namespace rill::compiler
