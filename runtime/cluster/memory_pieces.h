// A model in memory as control-encoded messages, and back: node 0's memory
// to a node that comes back (whole tensors), a node's pieces to its buddy
// (replicator.h) and to node 0 (master_gather.cc). Each message is a
// PlanPart holding only tensors (checksummed, verified when decoded) of the
// job and step it names; a piece carries its offset and shape in the
// logical tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "graph/job.h"
#include "runtime/cluster/control_codec.h"

namespace rill {

// Node 0's memory and a node's pieces go as messages of at most this many
// bytes each (a FlatBuffer holds at most 2 GiB); a tensor larger than one is
// refused by name.
inline constexpr size_t kMemoryMessageBytes = size_t{1} << 30;

// What the pieces of a model of variables `shapes` (whole or any part of
// them: one node's, a replica, a gather's stream) may weigh as messages:
// each variable and two optimizer state tensors, each as f32, with 64 KiB a
// tensor for the pieces' names, shapes and encoding, and 1 MiB for the
// messages'. Node 0 refuses a gather's stream past it, and a node a replica
// past it, before a byte of it is taken.
uint64_t most_piece_bytes(const std::map<std::string, Shape>& shapes);
// The tensors a model's pieces may be of, by name: every variable of `job`,
// and loss scaling's (compiler/gradient_norm.h).
std::map<std::string, Shape> model_shapes(const graph::Job& job);

// `values` (variables) and `state` (optimizer state, "w1/adam_m"), whole or
// pieces, in order, as messages of at most `most` bytes of tensors each (a
// larger tensor goes alone) and never past kMemoryMessageBytes. `what`
// names them in an error.
StatusOr<std::vector<std::string>> pack_tensors(std::vector<control::Tensor> values,
                                                std::vector<control::Tensor> state, int64_t job_id, int phase,
                                                int64_t step, size_t most, std::string_view what);

// Whether piece `t` (its values, offset and piece shape in its logical
// tensor, as another node sent them) fits that tensor, whose shape is
// `expected` when known: ok, or kDataLoss naming it. A tensor of rank past
// kMaxRank, or past kMaxTensorBytes, never fits: nothing of its size is
// computed or allocated.
Status piece_fits(const control::Tensor& t, const Shape* expected);

// Whole tensors assembled from pieces, each element placed once. What the
// pieces say of their tensors comes from other nodes: only the tensors
// named in `shapes`, of those shapes, are made.
class WholeTensors {
 public:
  // `shapes`: each variable's logical shape; optimizer state "v/m" has v's.
  explicit WholeTensors(std::map<std::string, Shape> shapes) : shapes_(std::move(shapes)) {}
  // Every tensor in `message` (pack_tensors' of job `job_id` after `step`
  // steps); a tensor not of `shapes`, a piece outside its tensor or
  // overlapping one placed already is kDataLoss.
  Status add_message(std::string_view message, int64_t job_id, int64_t step);
  // Ok when every variable of `variables` and every tensor added is
  // covered whole; else names the first that is not.
  Status check_whole(const std::vector<std::string>& variables) const;
  std::map<std::string, std::vector<float>> values, state;

  // The most pieces of one tensor (a layout's are at most its devices);
  // each new one is checked against those placed.
  static constexpr size_t kMostPieces = 1 << 14;

 private:
  struct Box {
    std::vector<int64_t> offset;
    Shape shape;
  };
  Status add(const control::Tensor& t, bool optimizer_state, std::map<std::string, std::vector<float>>& into);
  const std::map<std::string, Shape> shapes_;
  std::map<std::string, int64_t> covered_;   // elements placed, by tensor
  std::map<std::string, std::vector<Box>> placed_;  // pieces placed, by tensor
};

}  // namespace rill
