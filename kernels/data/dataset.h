// Dataset: the samples of a job, in memory. Loaded once by open() (idx, csv,
// synthetic or inline, see dataset_spec.h) and read-only afterwards, so several
// source actors on different threads may gather from one shared Dataset without
// locks. open() may be called from any thread; it does file IO and allocates.
//
// A dataset is a set of named fields; each field holds num_samples() samples of
// the same per-sample shape and dtype, stored contiguously, sample after sample.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/file_access.h"
#include "base/status.h"
#include "kernels/data/dataset_spec.h"
#include "kernels/tensor.h"

namespace rill {

// One field while a dataset is being built: per-sample meta plus the values of
// every sample. Exactly one of f32 / i32 is used, matching meta.dtype; or,
// for an f32 field of bytes (an idx file's pixels), u8, each value read as
// float(byte) * u8_scale when gathered (a quarter of f32's memory, and none
// of it written at load but the file's bytes); or, for a window field, none:
// sample i is the meta's elements of `windows` from i * window_stride +
// window_offset (a token stream's overlapping inputs and targets share one
// copy of the stream).
struct DatasetField {
  std::string name;
  TensorMeta meta;  // per sample: shape without the batch axis
  std::vector<float> f32;
  std::vector<int32_t> i32;
  std::vector<uint8_t> u8;  // f32 fields only
  float u8_scale = 1.0f;
  std::shared_ptr<const std::vector<int32_t>> windows;  // i32 window fields only
  int64_t window_stride = 0, window_offset = 0;
  int64_t window_origin = 0;  // where windows[0] lies in the file's token stream
};

// A value of an index field outside the bound its readers set
// (Dataset::find_outside).
struct OutsideValue {
  int64_t sample = 0, element = 0;  // which sample, which element of it (row-major)
  int32_t value = 0;
  int64_t stream_position = -1;  // window fields: the token's position in the file's stream; else -1
};

class Dataset {
 public:
  // Loads the dataset `spec` describes. Errors name the file and the problem.
  // `access`: where its files may lie (an agent's data roots), checked on
  // each opened descriptor (base/file_access.h); by default anywhere.
  static StatusOr<std::shared_ptr<const Dataset>> open(const DatasetSpec& spec, const FileAccess& access = {});
  // Builds a dataset from fields already in memory (readers and tests use it).
  // Checks that every field holds num_samples samples of its meta.
  static StatusOr<std::shared_ptr<const Dataset>> from_fields(std::string name, int64_t num_samples,
                                                              std::vector<DatasetField> fields);

  const std::string& name() const { return name_; }
  // The bytes its samples take in memory (what its vectors hold room for).
  size_t bytes() const;
  int64_t num_samples() const { return num_samples_; }
  // Field index by name; NotFound lists the fields this dataset has.
  StatusOr<int> field_index(const std::string& field) const;
  const std::vector<std::string>& field_names() const { return field_names_; }
  int num_fields() const { return static_cast<int>(fields_.size()); }
  // Per-sample meta of a field (shape without the batch axis, dtype).
  const TensorMeta& field_meta(int field) const { return fields_[field].meta; }
  // Copies samples `indices` of `field` contiguously into dst, which must hold
  // indices.size() * field_meta(field).bytes(). Allocates nothing.
  // REQUIRES: 0 <= field < num_fields(), every index in [0, num_samples()).
  void gather(int field, std::span<const int64_t> indices, void* dst) const;
  // The first value of i32 field `field` outside [0, bound), in sample
  // order, or nullopt. Reads every sample once (a source's check before its
  // first step). REQUIRES: field_meta(field).dtype is i32.
  std::optional<OutsideValue> find_outside(int field, int64_t bound) const;

 private:
  Dataset() = default;

  std::string name_;
  int64_t num_samples_ = 0;
  std::vector<DatasetField> fields_;
  std::vector<std::string> field_names_;
};

}  // namespace rill
