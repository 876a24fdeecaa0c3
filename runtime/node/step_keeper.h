// StepKeeper: a node's variables and optimizer state as they stood after
// each of its last two steps, in host memory, so that a job that loses a
// node goes on from memory at a step every survivor holds (live membership,
// docs/CLUSTER.md) instead of from a checkpoint on disk.
//
// Why two steps are enough: in synchronous data parallelism a variable can
// finish the update of step s + 1 only once every node has run the forward
// of step s + 1, which read every variable after step s; so on every node
// no variable is more than one step ahead of any other, and the steps held
// by every piece of every survivor always share one.
//
// Each distinct piece of the node is declared once by each run (a piece
// replicated over the node's devices is kept once); keep() is called on the
// piece's own thread, every step, and reuses its buffers (no allocation
// after the second step). A later run of the same job keeps on in the same
// pieces, so what the last run held stays until the new one steps past it
// (an attempt that fails before its first step loses nothing). Reading
// (steps(), values_at()) happens between runs. A mutex per keeper keeps it
// simple and safe.
//
// Beside the variables, what the node's compressed all-reduces carry from
// step to step (runtime/node/carried_state.h: its own error, and PowerSGD's
// Q), by name, after each of its last three steps: a boxing may run the
// all-reduce of the step after its node's newest variables, and the step
// every survivor holds may be the one before them.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "kernels/tensor.h"

namespace rill {

class StepKeeper {
 public:
  // Declares a piece (`name` at `offset` of `logical`, `shape` elements,
  // optimizer state named `state_names`); -1 when this node has declared
  // that piece already (another device's replica of it: nothing to keep).
  // A piece that is not `trained` keeps its first values at every step.
  // A piece a run of the same job declared before takes up its kept steps.
  int declare(const std::string& name, const Shape& logical, const std::vector<int64_t>& offset, const Shape& shape,
              const std::vector<std::string>& state_names, bool trained = true);
  // Before each run, which starts after `start` steps: `variables` are job
  // `job`'s, which a whole model has; another job's pieces are forgotten,
  // and steps past `start` (of an attempt given up) too.
  void begin_run(int64_t job, std::vector<std::string> variables, int64_t start);
  // Piece `piece` after `steps_done` steps: its values and optimizer state.
  void keep(int piece, int64_t steps_done, std::span<const float> model,
            std::span<const std::span<const float>> state);
  // The steps (steps done) at which this node holds every piece it
  // declared, as [first, last]; nullopt when none (nothing kept yet, or
  // pieces two steps apart, which synchronous training never makes).
  std::optional<std::pair<int64_t, int64_t>> steps() const;
  // Whether the pieces kept make up every variable begin_run() named whole (a
  // replica of the model: data parallelism), so this node alone can start a
  // run from them; a variable this node holds no piece of is not whole.
  bool whole() const;
  // Every variable and optimizer state tensor ("w/momentum") of job `job`
  // as it stood after `steps_done` steps, whole; an error when the pieces
  // are another job's, a piece does not hold that step, or they are not
  // whole.
  Status values_at(int64_t job, int64_t steps_done, std::map<std::string, std::vector<float>>* values,
                   std::map<std::string, std::vector<float>>* state) const;
  // One piece this node kept (`name` at `offset`, `shape` elements) and its
  // optimizer state as they stood after `steps_done` steps: a run of the
  // same plan on the same nodes starts from the pieces each node holds,
  // whole or not. An error names a piece this node does not hold there.
  Status piece_at(int64_t job, int64_t steps_done, const std::string& name, const std::vector<int64_t>& offset,
                  const Shape& shape, std::vector<float>* model, std::vector<std::vector<float>>* state) const;
  // Carried state `name` ("compression/<boxing>/bf16_error") after
  // `steps_done` steps, on its boxing's thread, every step (its buffers
  // reused from the fourth step on).
  void keep_carried(const std::string& name, int64_t steps_done, std::span<const float> values);
  // The carried state of job `job` this node kept after `steps_done` steps,
  // by name; what it holds of no such step is left out.
  std::map<std::string, std::vector<float>> carried_at(int64_t job, int64_t steps_done) const;

 private:
  struct Version {
    int64_t steps_done = -1;
    std::vector<float> model;
    std::vector<std::vector<float>> state;
  };
  struct Piece {
    std::string name;
    Shape logical, shape;
    std::vector<int64_t> offset;
    std::vector<std::string> state_names;
    bool trained = true;
    int64_t run = 0;  // the run that last declared it
    Version versions[2];  // the newer is the one with more steps done
  };
  const Version* version_at(const Piece& piece, int64_t steps_done) const REQUIRES(mu_);
  // Elements of each declared variable no piece covers.
  std::map<std::string, int64_t> uncovered() const REQUIRES(mu_);
  mutable Mutex mu_;
  std::vector<Piece> pieces_ GUARDED_BY(mu_);
  struct CarriedVersion {
    int64_t steps_done = -1;
    std::vector<float> values;
  };
  std::map<std::string, std::array<CarriedVersion, 3>, std::less<>> carried_ GUARDED_BY(mu_);
  std::vector<std::string> variables_ GUARDED_BY(mu_);
  int64_t job_ GUARDED_BY(mu_) = -1;
  int64_t run_ GUARDED_BY(mu_) = 0;
};

}  // namespace rill
