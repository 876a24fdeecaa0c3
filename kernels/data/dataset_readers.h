// The file- and spec-backed dataset readers behind Dataset::open(), one per
// DatasetSpec kind. Each validates its part of the spec and returns a complete
// Dataset or an error naming the file and the problem (never quoting more
// than a few characters of the file). Files are read only where `access`
// allows (base/file_access.h). Any thread may call them.
#pragma once

#include <memory>

#include "base/status.h"
#include "kernels/data/dataset.h"
#include "kernels/data/dataset_spec.h"

namespace rill {

// MNIST idx files (plain or gzip): "image" f32 [H*W] (pixel * scale), "label" i32 [].
StatusOr<std::shared_ptr<const Dataset>> read_idx_dataset(const DatasetSpec& spec, const FileAccess& access);
// Numeric CSV: "features" f32 [columns without the label] * scale, "label" i32 [].
StatusOr<std::shared_ptr<const Dataset>> read_csv_dataset(const DatasetSpec& spec, const FileAccess& access);
// Seeded random "features" in [0, 1) * scale and "label" in [0, num_classes).
StatusOr<std::shared_ptr<const Dataset>> make_synthetic_dataset(const DatasetSpec& spec);
// A token stream cut into windows of context + 1 tokens: "tokens" i32
// [context] and "targets" i32 [context], the same tokens one on. "text": a
// file's bytes are the tokens (vocabulary 256); "tokens": llm.c's token files
// (a 1,024-byte header, then uint16 ids). spec.split keeps a fraction of the
// stream (a validation split).
StatusOr<std::shared_ptr<const Dataset>> read_token_dataset(const DatasetSpec& spec, const FileAccess& access);
// One field per spec.tensors entry; axis 0 indexes samples.
StatusOr<std::shared_ptr<const Dataset>> make_inline_dataset(const DatasetSpec& spec);

}  // namespace rill
