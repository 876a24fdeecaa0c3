#include "kernels/data/dataset.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>

#include "kernels/data/dataset_cache.h"
#include "kernels/data/dataset_readers.h"

namespace rill {

StatusOr<std::shared_ptr<const Dataset>> Dataset::open(const DatasetSpec& spec, const FileAccess& access) {
  if (spec.kind == "synthetic") return make_synthetic_dataset(spec);
  if (spec.kind == "inline") return make_inline_dataset(spec);
  // The kinds read from files, kept for their next reader.
  const auto read = spec.kind == "idx"                          ? read_idx_dataset
                    : spec.kind == "csv"                        ? read_csv_dataset
                    : spec.kind == "text" || spec.kind == "tokens" ? read_token_dataset
                                                                   : nullptr;
  if (read != nullptr) return open_kept(spec, access, [&] { return read(spec, access); });
  return invalid_argument("dataset '{}': unknown kind '{}' (expected idx, csv, synthetic, inline, text or tokens)",
                          spec.name, spec.kind);
}

StatusOr<std::shared_ptr<const Dataset>> Dataset::from_fields(std::string name, int64_t num_samples,
                                                              std::vector<DatasetField> fields) {
  if (num_samples <= 0) return invalid_argument("dataset '{}': empty dataset: {} samples", name, num_samples);
  if (fields.empty()) return invalid_argument("dataset '{}': no fields", name);
  auto dataset = std::shared_ptr<Dataset>(new Dataset());
  for (const DatasetField& field : fields) {
    if (field.name.empty()) return invalid_argument("dataset '{}': a field has no name", name);
    for (const std::string& seen : dataset->field_names_) {
      if (seen == field.name) return invalid_argument("dataset '{}': field '{}' appears twice", name, field.name);
    }
    for (int64_t dim : field.meta.shape) {
      if (dim <= 0) {
        return invalid_argument("dataset '{}': field '{}' has per-sample shape {}: every dim must be positive", name,
                                field.name, shape_string(field.meta.shape));
      }
    }
    if (field.windows) {
      const int64_t last = (num_samples - 1) * field.window_stride + field.window_offset + num_elements(field.meta.shape);
      if (field.meta.dtype != DType::kI32 || !field.f32.empty() || !field.i32.empty() || !field.u8.empty() ||
          field.window_stride < 0 ||
          field.window_offset < 0 || last > static_cast<int64_t>(field.windows->size()))
        return internal_error("dataset '{}': window field '{}' reaches element {} of {}", name, field.name, last,
                              field.windows->size());
      dataset->field_names_.push_back(field.name);
      continue;
    }
    size_t held = 0;
    switch (field.meta.dtype) {
      case DType::kF32: held = field.f32.empty() ? field.u8.size() : field.f32.size(); break;
      case DType::kI32: held = field.i32.size(); break;
      case DType::kBF16:
      case DType::kF16:
        return invalid_argument("dataset '{}': field '{}' is {}; a dataset gives f32 and i32 fields (a cast op in "
                                "the job makes other dtypes)",
                                name, field.name, dtype_name(field.meta.dtype));
    }
    const size_t other = field.f32.size() + field.i32.size() + field.u8.size() - held;
    const size_t expected = static_cast<size_t>(num_samples) * static_cast<size_t>(num_elements(field.meta.shape));
    if (held != expected || other != 0) {
      return internal_error("dataset '{}': field '{}' ({} {} x {}) holds {} {} values and {} of the other dtype; "
                            "expected {}",
                            name, field.name, dtype_name(field.meta.dtype), num_samples,
                            shape_string(field.meta.shape), held, dtype_name(field.meta.dtype), other, expected);
    }
    dataset->field_names_.push_back(field.name);
  }
  dataset->name_ = std::move(name);
  dataset->num_samples_ = num_samples;
  dataset->fields_ = std::move(fields);
  return std::shared_ptr<const Dataset>(std::move(dataset));
}

size_t Dataset::bytes() const {
  size_t total = 0;
  std::vector<const void*> streams;  // window fields share one stream: counted once
  for (const DatasetField& f : fields_) {
    total += f.f32.capacity() * sizeof(float) + f.i32.capacity() * sizeof(int32_t) + f.u8.capacity();
    if (f.windows && std::find(streams.begin(), streams.end(), f.windows.get()) == streams.end()) {
      streams.push_back(f.windows.get());
      total += f.windows->capacity() * sizeof(int32_t);
    }
  }
  return total;
}

StatusOr<int> Dataset::field_index(const std::string& field) const {
  for (size_t i = 0; i < field_names_.size(); ++i) {
    if (field_names_[i] == field) return static_cast<int>(i);
  }
  return not_found("dataset '{}' has no field '{}'; its fields are: {}", name_, field, fmt::join(field_names_, ", "));
}

void Dataset::gather(int field, std::span<const int64_t> indices, void* dst) const {
  assert(field >= 0 && field < num_fields());
  const DatasetField& f = fields_[field];
  const size_t sample_bytes = f.meta.bytes();
  auto* out = static_cast<std::byte*>(dst);
  if (f.windows) {
    for (int64_t index : indices) {
      assert(index >= 0 && index < num_samples_);
      std::memcpy(out, f.windows->data() + index * f.window_stride + f.window_offset, sample_bytes);
      out += sample_bytes;
    }
    return;
  }
  if (!f.u8.empty()) {  // an f32 field held as bytes
    const size_t elements = sample_bytes / sizeof(float);
    float* to = static_cast<float*>(dst);
    const float scale = f.u8_scale;
    for (int64_t index : indices) {
      assert(index >= 0 && index < num_samples_);
      const uint8_t* from = f.u8.data() + static_cast<size_t>(index) * elements;
      for (size_t e = 0; e < elements; ++e) to[e] = static_cast<float>(from[e]) * scale;
      to += elements;
    }
    return;
  }
  const std::byte* src = nullptr;
  switch (f.meta.dtype) {
    case DType::kF32: src = reinterpret_cast<const std::byte*>(f.f32.data()); break;
    case DType::kI32: src = reinterpret_cast<const std::byte*>(f.i32.data()); break;
    case DType::kBF16:
    case DType::kF16: std::abort();  // refused by Dataset::create
  }
  for (int64_t index : indices) {
    assert(index >= 0 && index < num_samples_);
    std::memcpy(out, src + static_cast<size_t>(index) * sample_bytes, sample_bytes);
    out += sample_bytes;
  }
}

std::optional<OutsideValue> Dataset::find_outside(int field, int64_t bound) const {
  assert(field >= 0 && field < num_fields() && fields_[field].meta.dtype == DType::kI32);
  const DatasetField& f = fields_[field];
  const int64_t per_sample = num_elements(f.meta.shape);
  for (int64_t s = 0; s < num_samples_; ++s) {
    const int64_t first = f.windows ? s * f.window_stride + f.window_offset : s * per_sample;
    const int32_t* values = (f.windows ? f.windows->data() : f.i32.data()) + first;
    for (int64_t e = 0; e < per_sample; ++e)
      if (values[e] < 0 || values[e] >= bound)
        return OutsideValue{s, e, values[e], f.windows ? f.window_origin + first + e : -1};
  }
  return std::nullopt;
}

}  // namespace rill
