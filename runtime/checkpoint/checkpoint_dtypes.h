// How a checkpoint tensor's elements lie in model.safetensors: safetensors'
// dtype names ("F32", "I32", "BF16", "F16") and the conversions between a
// tensor's in-memory values (every element as 4 bytes: an f32's value, an
// i32's int, bit for bit) and its bytes on disk. F32 and I32 are stored as
// they are; BF16 and F16 round f32 values to nearest even (base/half.h, as
// PyTorch's .to(torch.bfloat16)) and read back exactly.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "kernels/tensor.h"

namespace rill {

std::string_view safetensors_dtype(DType dtype);
// The dtype safetensors names `name`; false for another name.
bool parse_safetensors_dtype(std::string_view name, DType* out);

// `values` as `dtype`'s bytes, little-endian.
std::vector<std::byte> encode_values(const std::vector<float>& values, DType dtype);
// `count` elements of `dtype` at `bytes`, as in-memory values.
std::vector<float> decode_values(const std::byte* bytes, size_t count, DType dtype);

}  // namespace rill
