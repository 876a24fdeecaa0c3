#include "runtime/checkpoint/checkpoint_dtypes.h"

#include <cstring>

#include "base/half.h"

namespace rill {

std::string_view safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kI32: return "I32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
  }
  return "?";
}

bool parse_safetensors_dtype(std::string_view name, DType* out) {
  for (DType d : kDTypes)
    if (safetensors_dtype(d) == name) {
      *out = d;
      return true;
    }
  return false;
}

std::vector<std::byte> encode_values(const std::vector<float>& values, DType dtype) {
  std::vector<std::byte> bytes(values.size() * dtype_size(dtype));
  visit_dtype(dtype, [&]<typename T>(std::type_identity<T>) {
    if constexpr (kIsHalf<T>) {
      for (size_t i = 0; i < values.size(); ++i) {
        const T h = T::from_float(values[i]);
        std::memcpy(bytes.data() + i * sizeof(T), &h, sizeof(T));
      }
    } else {
      std::memcpy(bytes.data(), values.data(), bytes.size());  // 4 bytes each, as they are
    }
  });
  return bytes;
}

std::vector<float> decode_values(const std::byte* bytes, size_t count, DType dtype) {
  std::vector<float> values(count);
  visit_dtype(dtype, [&]<typename T>(std::type_identity<T>) {
    if constexpr (kIsHalf<T>) {
      for (size_t i = 0; i < count; ++i) {
        T h;
        std::memcpy(&h, bytes + i * sizeof(T), sizeof(T));
        values[i] = h.to_float();
      }
    } else {
      std::memcpy(values.data(), bytes, count * sizeof(float));
    }
  });
  return values;
}

}  // namespace rill
