// DatasetSpec: where a job's samples come from. A plain value, written by the
// job file loader or JobBuilder and read by the data readers (kernels/data).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace rill {

struct InlineTensor {
  std::string name;
  Shape shape;               // axis 0 indexes samples
  DType dtype = DType::kF32;
  std::vector<float> f32;      // when dtype is f32
  std::vector<int32_t> i32;    // when dtype is i32
  std::vector<BFloat16> bf16;  // when dtype is bf16 (a fetched tensor; datasets hold f32 and i32)
  std::vector<Float16> f16;    // when dtype is f16 (likewise)
  bool operator==(const InlineTensor&) const = default;

  // The vector of element type T.
  template <typename T>
  std::vector<T>& values() {
    if constexpr (std::is_same_v<T, float>) {
      return f32;
    } else if constexpr (std::is_same_v<T, int32_t>) {
      return i32;
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      return bf16;
    } else {
      static_assert(std::is_same_v<T, Float16>, "no vector of this element type");
      return f16;
    }
  }
  template <typename T>
  const std::vector<T>& values() const {
    return const_cast<InlineTensor*>(this)->values<T>();
  }
  // How many values the dtype's vector holds, and how many the others do
  // (none in a well-formed tensor).
  size_t held() const {
    return visit_dtype(dtype, [&]<typename T>(std::type_identity<T>) { return values<T>().size(); });
  }
  size_t held_by_other_dtypes() const { return f32.size() + i32.size() + bf16.size() + f16.size() - held(); }
};

// Fields a dataset offers, by kind:
//   idx:       "image" (f32, pixel * scale), "label" (i32)
//   csv:       "features" (f32, every column but the label, * scale), "label" (i32)
//   synthetic: "features" (f32, uniform in [0, 1) * scale), "label" (i32 in [0, num_classes)),
//              and with id_fields > 0 "ids" (i32 [id_fields] in [0, id_range): a click
//              log's categorical features, each id voting for a class)
//   inline:    one field per tensor, by its name
//   text, tokens: "tokens" and "targets" (i32 [context]): windows of a token
//              stream, the targets one token on (kernels/data/token_dataset.cc)
// The first int32 of an llm.c token file (a "tokens" dataset).
inline constexpr int32_t kTokenFileMagic = 20240520;

struct DatasetSpec {
  std::string name;
  std::string kind;           // "idx" | "csv" | "synthetic" | "inline" | "text" | "tokens"
  std::string images;         // idx: images file, plain or .gz
  std::string labels;         // idx: labels file, plain or .gz
  std::string path;           // csv, text, tokens
  int label_column = -1;      // csv: -1 means no label column
  bool header = false;        // csv: skip the first line
  int64_t num_samples = 0;    // synthetic
  int num_classes = 10;       // synthetic
  Shape feature_shape;        // synthetic: per-sample shape of "features"
  int64_t id_fields = 0;      // synthetic: > 0 adds "ids" [id_fields] i32 in [0, id_range)
  int64_t id_range = 0;
  uint64_t seed = 0;          // synthetic
  float scale = 1.0f;         // features are multiplied by this
  std::vector<InlineTensor> tensors;  // inline
  int64_t context = 0;        // text, tokens: tokens per sample
  double split_from = 0.0, split_to = 1.0;  // text, tokens: the fraction of the stream kept
  bool operator==(const DatasetSpec&) const = default;
};

}  // namespace rill
