#include "tests/kernels/sbp_check.h"

#include <cmath>

namespace rill::testing {
namespace {

// Elements before, along and after `axis`.
void axis_extents(const Shape& shape, int axis, int64_t* outer, int64_t* inner) {
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < axis; ++i) *outer *= shape[i];
  for (size_t i = axis + 1; i < shape.size(); ++i) *inner *= shape[i];
}

template <typename T>
void copy_rows(const std::vector<T>& from, int64_t from_dim, int64_t from_start, std::vector<T>* to, int64_t to_dim,
               int64_t to_start, int64_t rows, int64_t outer, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < inner; ++i)
        (*to)[(o * to_dim + to_start + r) * inner + i] = from[(o * from_dim + from_start + r) * inner + i];
}

bool close(double got, double want, double tolerance) {
  return std::fabs(got - want) <= tolerance * std::max(1.0, std::fabs(want));
}

Status compare(const Tensor& got, const Tensor& want, double tolerance, const std::string& what) {
  if (got.shape != want.shape || got.dtype != want.dtype)
    return internal_error("{}: got {} {}, want {} {}", what, shape_string(got.shape), dtype_name(got.dtype),
                          shape_string(want.shape), dtype_name(want.dtype));
  // Integers compare exactly, floats (as float) within the tolerance.
  const std::vector<float> g = got.as_floats(), w = want.as_floats();
  const bool exact = !is_float(want.dtype);
  for (int64_t j = 0; j < want.size(); ++j) {
    const bool ok = exact ? got.i32[j] == want.i32[j] : close(g[j], w[j], tolerance);
    if (!ok) return internal_error("{}: element {} is {}, want {}", what, j, g[j], w[j]);
  }
  return {};
}

// Random addends, one per device, that sum to `whole`.
std::vector<Tensor> partial_pieces(const Tensor& whole, int parallel, uint64_t seed) {
  std::vector<Tensor> pieces;
  Tensor rest = whole;
  for (int k = 0; k + 1 < parallel; ++k) {
    pieces.push_back(Tensor::uniform(whole.shape, seed + k));
    for (int64_t j = 0; j < whole.size(); ++j) rest.f32[j] -= pieces.back().f32[j];
  }
  pieces.push_back(rest);
  return pieces;
}

}  // namespace

Tensor split_piece(const Tensor& whole, int axis, int parallel, int index) {
  Tensor piece = Tensor::zeros(piece_region(whole.shape, Sbp::split(axis), 1, parallel, index).extent, whole.dtype);
  int64_t outer, inner;
  axis_extents(whole.shape, axis, &outer, &inner);
  const int64_t start = split_offset(whole.shape[axis], parallel, index);
  const int64_t rows = piece.shape[axis];
  switch (whole.dtype) {
    case DType::kF32: copy_rows(whole.f32, whole.shape[axis], start, &piece.f32, rows, 0, rows, outer, inner); break;
    case DType::kI32: copy_rows(whole.i32, whole.shape[axis], start, &piece.i32, rows, 0, rows, outer, inner); break;
    case DType::kBF16:
    case DType::kF16: copy_rows(whole.h16, whole.shape[axis], start, &piece.h16, rows, 0, rows, outer, inner); break;
  }
  return piece;
}

Tensor concat_pieces(const std::vector<Tensor>& pieces, int axis) {
  Shape shape = pieces.at(0).shape;
  shape[axis] = 0;
  for (const Tensor& p : pieces) shape[axis] += p.shape[axis];
  Tensor whole = Tensor::zeros(shape, pieces[0].dtype);
  int64_t outer, inner;
  axis_extents(shape, axis, &outer, &inner);
  int64_t start = 0;
  for (const Tensor& p : pieces) {
    const int64_t rows = p.shape[axis];
    switch (whole.dtype) {
      case DType::kF32: copy_rows(p.f32, rows, 0, &whole.f32, shape[axis], start, rows, outer, inner); break;
      case DType::kI32: copy_rows(p.i32, rows, 0, &whole.i32, shape[axis], start, rows, outer, inner); break;
      case DType::kBF16:
      case DType::kF16: copy_rows(p.h16, rows, 0, &whole.h16, shape[axis], start, rows, outer, inner); break;
    }
    start += rows;
  }
  return whole;
}

std::string signature_string(const SbpSignature& signature) {
  auto names = [](const std::vector<Sbp>& list) {
    std::vector<std::string> out;
    for (const Sbp& sbp : list) out.push_back(sbp.to_string());
    return out;
  };
  return fmt::format("({}) -> ({})", fmt::join(names(signature.inputs), ", "),
                     fmt::join(names(signature.outputs), ", "));
}

Status check_sbp_signatures(const std::string& type, const std::vector<Tensor>& inputs, const Attrs& attrs,
                            int parallel, double tolerance) {
  const OpDef* def = find_op(type);
  if (def == nullptr) return not_found("no op type '{}'", type);
  auto single = run_op(type, inputs, attrs);
  if (!single.ok()) return single.status().with_context("single device");
  std::vector<TensorMeta> metas;
  std::vector<Shape> logical;
  for (const Tensor& t : inputs) {
    metas.push_back(t.meta());
    logical.push_back(t.shape);
  }
  const std::vector<SbpSignature> signatures = def->sbp(attrs, metas);
  if (signatures.empty()) return internal_error("op '{}' offers no SBP signature", type);

  for (size_t s = 0; s < signatures.size(); ++s) {
    const SbpSignature& sig = signatures[s];
    const std::string where = fmt::format("op '{}' signature {}", type, signature_string(sig));
    if (sig.inputs.size() != inputs.size() || sig.outputs.size() != single->size())
      return internal_error("{}: arity is {} -> {}, the op has {} -> {}", where, sig.inputs.size(),
                            sig.outputs.size(), inputs.size(), single->size());
    // pieces[k][i]: device k's piece of input i.
    std::vector<std::vector<Tensor>> pieces(parallel);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Sbp& sbp = sig.inputs[i];
      if (sbp.kind == Sbp::kSplit && sbp.axis >= static_cast<int>(inputs[i].shape.size()))
        return internal_error("{}: splits input {} {} on axis {}", where, i, shape_string(inputs[i].shape), sbp.axis);
      if (sbp.kind == Sbp::kPartialSum && inputs[i].dtype != DType::kF32)
        return internal_error("{}: input {} is i32 but partial-sum", where, i);
      std::vector<Tensor> addends;
      if (sbp.kind == Sbp::kPartialSum) addends = partial_pieces(inputs[i], parallel, 100 * s + i);
      for (int k = 0; k < parallel; ++k) {
        if (sbp.kind == Sbp::kSplit) pieces[k].push_back(split_piece(inputs[i], sbp.axis, parallel, k));
        else if (sbp.kind == Sbp::kBroadcast) pieces[k].push_back(inputs[i]);
        else pieces[k].push_back(addends[k]);
      }
    }
    if (def->copies_bytes) {
      // The kernel copies bytes (reshape): device k's output piece is its
      // input piece's values. Splits whose pieces differ in size for this
      // count are refused by the compiler (sbp_deduction.cc), so skipped.
      const Tensor& want = (*single)[0];
      const Sbp& out_sbp = sig.outputs[0];
      bool sizes_agree = true;
      for (int k = 0; k < parallel && out_sbp.kind == Sbp::kSplit; ++k)
        sizes_agree = sizes_agree && split_piece(want, out_sbp.axis, parallel, k).size() == pieces[k][0].size();
      if (!sizes_agree) continue;
      for (int k = 0; k < parallel; ++k) {
        const Tensor expected = out_sbp.kind == Sbp::kSplit ? split_piece(want, out_sbp.axis, parallel, k) : want;
        const Tensor& got = pieces[k][0];
        if (sig.inputs[0].kind == Sbp::kPartialSum) continue;  // addends: linear, nothing to compare per piece
        if (got.f32 != expected.f32 || got.i32 != expected.i32)
          return internal_error("{}: device {}'s input piece is not its output piece", where, k);
      }
      continue;
    }
    // outs[k][o]: device k's piece of output o.
    std::vector<std::vector<Tensor>> outs;
    RunOptions options;
    options.logical_inputs = logical;
    for (int k = 0; k < parallel; ++k) {
      // Each piece's place in its logical tensor: a split's earlier pieces before it.
      options.input_offsets.clear();
      for (size_t i = 0; i < inputs.size(); ++i) {
        Shape offset(inputs[i].shape.size(), 0);
        if (const Sbp& sbp = sig.inputs[i]; sbp.kind == Sbp::kSplit)
          for (int j = 0; j < k; ++j) offset[static_cast<size_t>(sbp.axis)] += pieces[j][i].shape[static_cast<size_t>(sbp.axis)];
        options.input_offsets.push_back(std::move(offset));
      }
      auto out = run_kernel(*def, pieces[k], attrs, options);
      if (!out.ok()) return out.status().with_context(fmt::format("{} device {}", where, k));
      outs.push_back(std::move(*out));
    }
    for (size_t o = 0; o < single->size(); ++o) {
      const Tensor& want = (*single)[o];
      const Sbp& sbp = sig.outputs[o];
      const std::string what = fmt::format("{} output {}", where, o);
      if (sbp.kind == Sbp::kSplit) {
        if (sbp.axis >= static_cast<int>(want.shape.size()))
          return internal_error("{}: splits output {} on axis {}", what, shape_string(want.shape), sbp.axis);
        std::vector<Tensor> parts;
        for (int k = 0; k < parallel; ++k) parts.push_back(outs[k][o]);
        RILL_RETURN_IF_ERROR(compare(concat_pieces(parts, sbp.axis), want, tolerance, what));
      } else if (sbp.kind == Sbp::kBroadcast) {
        for (int k = 0; k < parallel; ++k)
          RILL_RETURN_IF_ERROR(compare(outs[k][o], want, tolerance, fmt::format("{} device {}", what, k)));
      } else {
        if (want.dtype != DType::kF32) return internal_error("{}: an i32 output cannot be partial-sum", what);
        Tensor sum = outs[0][o];
        for (int k = 1; k < parallel; ++k) {
          if (outs[k][o].shape != sum.shape)
            return internal_error("{}: pieces have shapes {} and {}", what, shape_string(sum.shape),
                                  shape_string(outs[k][o].shape));
          for (int64_t j = 0; j < sum.size(); ++j) sum.f32[j] += outs[k][o].f32[j];
        }
        RILL_RETURN_IF_ERROR(compare(sum, want, tolerance, what));
      }
    }
  }
  return {};
}

}  // namespace rill::testing
