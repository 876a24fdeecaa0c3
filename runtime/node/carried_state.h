// What a compressed all-reduce of gradients carries from step to step
// (train.compression: actor/gradient_compression.h, actor/powersgd.h), as
// checkpoints hold it beside the variables, so that a run resumed from a
// checkpoint goes on as the straight run did:
//   compression/<boxing>/<kind>_error  [nodes, n]  row k: node k's error
//   compression/<boxing>/powersgd_q    [m]         PowerSGD's Q, the same on
//                                                  every node: written by the first
// (<kind> bf16 or powersgd: a checkpoint of one never restores the other)
// <boxing> is the boxing task's name without its node ("bucket:grad/logits/
// reduce_sum+3:P->B"): the same in every run of the job's plan. A run
// whose plan has other buckets or another rank finds no tensor of its
// size and starts from zero, as a run without a checkpoint; one on other
// nodes starts from zero error and the checkpoint's Q. A live job's
// memory holds the same tensors, by node (runtime/node/step_keeper.h).
// Internal to runtime/.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "actor/body.h"
#include "base/status.h"
#include "compiler/plan_generated.h"
#include "graph/job_modes.h"
#include "kernels/tensor.h"

namespace rill {

inline constexpr std::string_view kCarriedPrefix = graph::kCarriedStatePrefix;

struct CarriedPiece {
  std::string name;  // "compression/<boxing>/bf16_error", ".../powersgd_error" or ".../powersgd_q"
  Shape logical, offset, shape;
  bool q = false;       // PowerSGD's Q, else this node's error
  bool writes = true;   // into checkpoints (Q: the first node only; every node reads it)
};

// Whether checkpoint tensor `name` is carried state of `compression`'s
// kind (".../bf16_error"; ".../powersgd_error", ".../powersgd_q").
bool carried_of(std::string_view name, graph::Compression compression);

// The pieces of boxing task `task` of a verified plan; none when it
// compresses nothing.
StatusOr<std::vector<CarriedPiece>> carried_pieces(const plan::Plan& plan, const plan::Task& task);

// `piece`'s values as `carried` (the body's) holds them.
std::vector<float> carried_values(const CarriedPiece& piece, const BoxingBody::Carried& carried);

// Node `node`'s part of a checkpoint's carried state (name -> shape and
// values), for a plan of `nodes` nodes: its row of each error [nodes, n],
// and each Q whole; an error of another node count is left out (that
// layout starts from zero error and the checkpoint's Q). Each node is sent
// only its own.
std::map<std::string, std::vector<float>> carried_for_node(
    const std::map<std::string, std::pair<Shape, std::vector<float>>>& checkpoint, int node, int nodes);

// Restores `body` from `state` (this node's part of the carried state, by
// name: carried_for_node) after `steps_done` steps. Nothing to restore (no tensor of these
// names) is ok; Q without an error restores Q, the error zero; tensors of
// other sizes are left, and said in the result (empty when all was
// restored or nothing was there).
std::string restore_carried(BoxingBody& body, const std::vector<CarriedPiece>& pieces,
                            const std::map<std::string, std::vector<float>>& state, int64_t steps_done);

}  // namespace rill
