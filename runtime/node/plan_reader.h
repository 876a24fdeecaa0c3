// Helpers that read plan tables into the runtime's plain values. Pure functions.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "compiler/plan_generated.h"
#include "kernels/attrs.h"
#include "kernels/data/dataset_spec.h"
#include "kernels/tensor.h"

namespace rill {

Attrs read_attrs(const flatbuffers::Vector<flatbuffers::Offset<plan::Attr>>* attrs);
Shape read_shape(const flatbuffers::Vector<int64_t>* dims);
using compiler::read_dtype;
std::string read_string(const flatbuffers::String* s);
DatasetSpec read_dataset(const plan::Dataset& dataset);

// Copies between a logical tensor and its piece at per-axis `offset`.
void copy_block(const Shape& logical, std::span<const int64_t> offset, const Shape& piece, float* whole,
                float* block, bool into_block);

// Places a variable's piece (`piece` shaped, at `offset`) into the whole
// logical tensor being assembled: `whole` and `whole_shape` start empty
// (the first piece sizes them, zeros elsewhere). The one way pieces become
// a variable: a node's report, the master's gather of every node's, a
// checkpoint's tensors.
void place_piece(const Shape& logical, std::span<const int64_t> offset, const Shape& piece, std::span<float> values,
                 Shape* whole_shape, std::vector<float>* whole);

}  // namespace rill
