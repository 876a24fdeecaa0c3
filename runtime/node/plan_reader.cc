#include "runtime/node/plan_reader.h"

#include <cstring>

namespace rill {

Attrs read_attrs(const flatbuffers::Vector<flatbuffers::Offset<plan::Attr>>* attrs) {
  Attrs out;
  if (!attrs) return out;
  for (const plan::Attr* attr : *attrs) {
    std::string name = attr->name()->str();
    switch (attr->type()) {
      case plan::AttrType::Int: out.set(name, attr->i()); break;
      case plan::AttrType::Float: out.set(name, attr->f()); break;
      case plan::AttrType::String: out.set(name, read_string(attr->s())); break;
      case plan::AttrType::Ints: out.set(name, read_shape(attr->ints())); break;
    }
  }
  return out;
}

Shape read_shape(const flatbuffers::Vector<int64_t>* dims) {
  return dims ? Shape(dims->begin(), dims->end()) : Shape{};
}


std::string read_string(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

DatasetSpec read_dataset(const plan::Dataset& d) {
  DatasetSpec spec;
  spec.name = read_string(d.name());
  spec.kind = read_string(d.kind());
  spec.images = read_string(d.images());
  spec.labels = read_string(d.labels());
  spec.path = read_string(d.path());
  spec.label_column = d.label_column();
  spec.header = d.header();
  spec.num_samples = d.num_samples();
  spec.num_classes = d.num_classes();
  spec.seed = d.seed();
  spec.scale = d.scale();
  spec.feature_shape = read_shape(d.feature_shape());
  spec.id_fields = d.id_fields();
  spec.id_range = d.id_range();
  spec.context = d.context();
  spec.split_from = d.split_from();
  spec.split_to = d.split_to();
  if (d.tensors()) {
    for (const plan::InlineTensor* t : *d.tensors()) {
      InlineTensor tensor;
      tensor.name = read_string(t->name());
      tensor.shape = read_shape(t->shape());
      tensor.dtype = read_dtype(t->dtype());
      switch (tensor.dtype) {
        case DType::kF32:
          if (t->f32()) tensor.f32.assign(t->f32()->begin(), t->f32()->end());
          break;
        case DType::kI32:
          if (t->i32()) tensor.i32.assign(t->i32()->begin(), t->i32()->end());
          break;
        case DType::kBF16:
        case DType::kF16: break;  // a plan holds none: the dataset refuses the field
      }
      spec.tensors.push_back(std::move(tensor));
    }
  }
  return spec;
}

void place_piece(const Shape& logical, std::span<const int64_t> offset, const Shape& piece, std::span<float> values,
                 Shape* whole_shape, std::vector<float>* whole) {
  if (whole->empty()) {
    *whole_shape = logical;
    whole->assign(static_cast<size_t>(num_elements(logical)), 0.0f);
  }
  copy_block(logical, offset, piece, whole->data(), values.data(), false);
}

void copy_block(const Shape& logical, std::span<const int64_t> offset, const Shape& piece, float* whole,
                float* block, bool into_block) {
  Region piece_region{Shape(logical.size(), 0), piece};
  for (size_t a = 0; a < offset.size() && a < logical.size(); ++a) piece_region.origin[a] = offset[a];
  const Region all = whole_region(logical);
  if (into_block) copy_region(whole, all, block, piece_region, piece_region, sizeof(float));
  else copy_region(block, piece_region, whole, all, piece_region, sizeof(float));
}

}  // namespace rill
