// Datasets that need no file: seeded synthetic data and tensors written inline
// in the job.
#include <random>

#include "kernels/data/dataset_readers.h"

namespace rill {
namespace {

// Synthetic datasets are built on every node independently, so they must fit
// in one machine's memory; a typo in num_samples fails here, not in the OOM killer.
constexpr uint64_t kMaxSyntheticBytes = uint64_t{32} << 30;

// A float uniform in [0, 1) from the top 24 bits: exact in f32, never 1.0f.
float unit_float(std::mt19937_64& gen) { return static_cast<float>(gen() >> 40) * 0x1.0p-24f; }

}  // namespace

// Labels are a fixed linear function of the features, not independent noise,
// so a model can learn them and tests can watch the loss fall: feature j votes
// for class j % num_classes with a seeded weight in [-1, 1), and the label is
// the class with the largest total vote. The arithmetic order is fixed, so every
// node builds the same dataset from the same spec.
StatusOr<std::shared_ptr<const Dataset>> make_synthetic_dataset(const DatasetSpec& spec) {
  const std::string where = fmt::format("synthetic dataset '{}'", spec.name);
  if (spec.num_samples <= 0) return invalid_argument("{}: empty dataset: num_samples is {}", where, spec.num_samples);
  if (spec.num_classes < 1) return invalid_argument("{}: num_classes is {}; need at least 1", where, spec.num_classes);
  uint64_t per_sample = 1;
  for (int64_t dim : spec.feature_shape) {
    if (dim <= 0 || static_cast<uint64_t>(dim) > kMaxSyntheticBytes) {
      return invalid_argument("{}: feature_shape {}: every dim must be in [1, {}]", where,
                              shape_string(spec.feature_shape), kMaxSyntheticBytes);
    }
    per_sample *= static_cast<uint64_t>(dim);
    if (per_sample > kMaxSyntheticBytes) break;
  }
  const uint64_t n = static_cast<uint64_t>(spec.num_samples);
  if (per_sample > kMaxSyntheticBytes / 4 || n > kMaxSyntheticBytes / 4 / per_sample) {
    return invalid_argument("{}: {} samples of shape {} exceed the {} GiB limit for synthetic data", where, n,
                            shape_string(spec.feature_shape), kMaxSyntheticBytes >> 30);
  }

  DatasetField features{"features", TensorMeta{spec.feature_shape, DType::kF32}, {}, {}};
  features.f32.resize(n * per_sample);
  DatasetField label{"label", TensorMeta{{}, DType::kI32}, {}, {}};
  label.i32.resize(n);

  std::mt19937_64 weight_gen(spec.seed ^ 0x5eed5eed5eed5eedULL);
  std::vector<float> weight(per_sample);
  for (float& w : weight) w = 2.0f * unit_float(weight_gen) - 1.0f;

  std::mt19937_64 gen(spec.seed);
  const size_t classes = static_cast<size_t>(spec.num_classes);
  std::vector<float> score(classes);
  for (uint64_t i = 0; i < n; ++i) {
    float* x = features.f32.data() + i * per_sample;
    std::fill(score.begin(), score.end(), 0.0f);
    for (uint64_t j = 0; j < per_sample; ++j) {
      const float u = unit_float(gen);
      score[j % classes] += weight[j] * (u - 0.5f);
      x[j] = u * spec.scale;
    }
    size_t best = 0;
    for (size_t c = 1; c < classes; ++c) {
      if (score[c] > score[best]) best = c;
    }
    label.i32[i] = static_cast<int32_t>(best);
  }
  std::vector<DatasetField> fields;
  fields.push_back(std::move(features));
  if (spec.id_fields > 0) {
    // Clicks: each id votes for every class with its own weight, and the
    // label is the class of the largest total vote over the sample's ids.
    // The weights do not depend on `seed` (which draws the samples): every
    // click dataset of one id_range and num_classes follows the same rule,
    // so a test set is the same spec with another seed.
    if (spec.id_range < 1) return invalid_argument("{}: id_range is {}; need at least 1 with id_fields", where, spec.id_range);
    const uint64_t fields_per = static_cast<uint64_t>(spec.id_fields);
    if (fields_per > 4096 || n > kMaxSyntheticBytes / 4 / fields_per)
      return invalid_argument("{}: {} samples of {} ids exceed the limits for synthetic data", where, n, fields_per);
    DatasetField ids{"ids", TensorMeta{{spec.id_fields}, DType::kI32}, {}, {}};
    ids.i32.resize(n * fields_per);
    std::mt19937_64 id_gen(spec.seed ^ 0x1d5c11c4ULL);
    const uint64_t range = static_cast<uint64_t>(spec.id_range);
    std::vector<float> votes(static_cast<size_t>(std::min<uint64_t>(range, uint64_t{1} << 20)) * classes);
    std::mt19937_64 vote_gen(0x707e5ULL);
    for (float& v : votes) v = 2.0f * unit_float(vote_gen) - 1.0f;
    const uint64_t voters = votes.size() / classes;
    for (uint64_t i = 0; i < n; ++i) {
      std::vector<float> total(classes, 0.0f);
      for (uint64_t f = 0; f < fields_per; ++f) {
        const uint64_t id = id_gen() % range;
        ids.i32[i * fields_per + f] = static_cast<int32_t>(id);
        for (size_t c = 0; c < classes; ++c) total[c] += votes[(id % voters) * classes + c];
      }
      size_t best = 0;
      for (size_t c = 1; c < classes; ++c)
        if (total[c] > total[best]) best = c;
      label.i32[i] = static_cast<int32_t>(best);
    }
    fields.push_back(std::move(label));
    fields.push_back(std::move(ids));
    return Dataset::from_fields(spec.name, spec.num_samples, std::move(fields));
  }
  fields.push_back(std::move(label));
  return Dataset::from_fields(spec.name, spec.num_samples, std::move(fields));
}

StatusOr<std::shared_ptr<const Dataset>> make_inline_dataset(const DatasetSpec& spec) {
  const std::string where = fmt::format("inline dataset '{}'", spec.name);
  if (spec.tensors.empty()) return invalid_argument("{}: no tensors given", where);
  int64_t num_samples = -1;
  std::vector<DatasetField> fields;
  for (const InlineTensor& tensor : spec.tensors) {
    const std::string what = fmt::format("{}: tensor '{}'", where, tensor.name);
    if (tensor.name.empty()) return invalid_argument("{}: a tensor has no name", where);
    if (tensor.shape.empty()) {
      return invalid_argument("{}: shape [] has no sample axis; axis 0 must index samples", what);
    }
    for (int64_t dim : tensor.shape) {
      if (dim < 0) return invalid_argument("{}: shape {} has a negative dim", what, shape_string(tensor.shape));
    }
    if (tensor.shape[0] == 0) {
      return invalid_argument("{}: empty dataset: shape {} has 0 samples", what, shape_string(tensor.shape));
    }
    if (num_samples >= 0 && tensor.shape[0] != num_samples) {
      return invalid_argument("{}: shape {} has {} samples on axis 0, but tensor '{}' has {}", what,
                              shape_string(tensor.shape), tensor.shape[0], spec.tensors[0].name, num_samples);
    }
    num_samples = tensor.shape[0];
    const size_t held = tensor.held(), other = tensor.held_by_other_dtypes();
    const int64_t expected = num_elements(tensor.shape);
    if (held != static_cast<size_t>(expected)) {
      return invalid_argument("{}: shape {} needs {} values, found {}", what, shape_string(tensor.shape), expected,
                              held);
    }
    if (other != 0) {
      return invalid_argument("{}: dtype is {} but {} values of the other dtype were given", what,
                              dtype_name(tensor.dtype), other);
    }
    DatasetField field{tensor.name, TensorMeta{Shape(tensor.shape.begin() + 1, tensor.shape.end()), tensor.dtype},
                       tensor.f32, tensor.i32};
    fields.push_back(std::move(field));
  }
  return Dataset::from_fields(spec.name, num_samples, std::move(fields));
}

}  // namespace rill
