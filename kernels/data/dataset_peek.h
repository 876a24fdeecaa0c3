// What a dataset's files hold per sample, read from their heads without
// loading them: the idx images file's header, the CSV file's first row.
// `rill check` compares it with what the job declares (the run compares
// again with what it loaded). Any thread; reads at most the first row.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/data/dataset.h"
#include "kernels/data/dataset_spec.h"
#include "kernels/tensor.h"

namespace rill {

struct PeekedField {
  std::string name;
  TensorMeta meta;  // per sample
};

// Why `spec`'s files cannot be read on this machine, or "" when they can:
// one that does not exist here, is not a regular file (a pipe or a device,
// which the run reads as a stream and a check must not wait on) or is not
// readable. No file (synthetic, inline): "".
std::string unreadable_here(const DatasetSpec& spec);

// The fields of `spec` with their per-sample meta, for the kinds read from
// files (idx, csv: from their heads; text, tokens: from the spec, once the
// file opens); nullopt for those the spec itself makes (synthetic,
// inline). Errors: a file unreadable_here, or not of its kind, naming it.
StatusOr<std::optional<std::vector<PeekedField>>> peek_dataset_fields(const DatasetSpec& spec);

// The error for input `input` reading `field` of `spec`, declared `declared`
// per sample where the data holds `held`: names the input, the field, the
// dataset, its files and both shapes. Used wherever the two are compared
// (`rill check`, a source before its first step).
Status data_mismatch(const std::string& input, const std::string& field, const DatasetSpec& spec,
                     const TensorMeta& declared, const TensorMeta& held);
// The error for input `input` reading `field` of `spec` where a value lies
// outside [0, bound), the bound of op `reader`: names the value, where it
// lies (the token's position in the file, or the sample and element) and
// the op.
Status index_outside(const std::string& input, const std::string& field, const DatasetSpec& spec,
                     const OutsideValue& outside, int64_t bound, const std::string& reader);
// Whether `declared` per sample can be read from `held`: as many elements,
// the same dtype (a [28, 28] input may read [784] pixels).
inline bool data_agrees(const TensorMeta& declared, const TensorMeta& held) {
  return num_elements(declared.shape) == num_elements(held.shape) && declared.dtype == held.dtype;
}

}  // namespace rill
