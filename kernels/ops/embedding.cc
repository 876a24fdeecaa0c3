// embedding(ids, table): ids [...] i32, table [V, D] f32 -> out [..., D],
// out[i, :] = table[ids[i], :] (a gather of rows). Every id must be a row:
// an id outside [0, V) is an error naming it and its position.
// embedding_grad(ids, dout) with attr `rows` (V) -> dtable [V, D], the rows
// of dout added into the rows their ids name (zeros elsewhere). ids get no
// gradient.
// A block of a larger table (a distributed lookup table's, on a pserver:
// compiler/pserver.h): attrs `total_rows` (the whole table's) and
// `row_offset` (the block's first row). Ids must be in [0, total_rows);
// those outside the block's rows give zeros (embedding) or nothing
// (embedding_grad), so the blocks' outputs add up to the whole lookup.
// embedding_mask(ids, x) with attrs `row_offset`, `rows` (a block's) and
// `total_rows`: x [..., D] shaped like an embedding of ids; out[i, :] =
// x[i, :] where ids[i] is one of the block's rows, else zeros. Its gradient
// is itself: on a trainer it cuts the gradient of a lookup down to the rows
// one block holds, so only those cross to its pserver (compiler/pserver.cc).
//
// SBP: the ids split on any axis with the table B (each device its rows of
// the batch), everything B, or the table split on its columns S(1) with the
// ids B (each device its part of every embedding: out split on its last
// axis). The gradient follows: split ids and dout give partial sums of the
// table's gradient (P), split columns a split gradient.

#include <cstring>

#include "kernels/ops/math_util.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

Status check_ids(const TensorMeta& ids, const char* op) {
  if (ids.dtype != DType::kI32)
    return invalid_argument("op '{}': ids must be i32, got {} {}", op, dtype_name(ids.dtype), shape_string(ids.shape));
  return {};
}

// The rows ids may name and where this table (block) starts in them.
struct Rows {
  int64_t total, offset;
};

StatusOr<Rows> rows_of(const Attrs& attrs, int64_t rows, const char* op) {
  const int64_t total = attrs.get_int("total_rows", 0), offset = attrs.get_int("row_offset", 0);
  if (total == 0 && offset == 0) return Rows{rows, 0};
  if (offset < 0 || total < 1 || offset + rows > total)
    return invalid_argument("op '{}': a block of {} rows at row_offset {} does not fit in total_rows {}", op, rows,
                            offset, total);
  return Rows{total, offset};
}

Status infer_embedding(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_ids(in[0], "embedding"));
  const TensorMeta& table = in[1];
  if (table.dtype != DType::kF32 || table.shape.size() != 2)
    return invalid_argument("op 'embedding': the table must be f32 [rows, dim], got {} {}", dtype_name(table.dtype),
                            shape_string(table.shape));
  RILL_RETURN_IF_ERROR(rows_of(attrs, table.shape[0], "embedding").status());
  Shape shape = in[0].shape;
  shape.push_back(table.shape[1]);
  out->push_back({shape, DType::kF32});
  return {};
}

// The inputs of embedding_grad and embedding_mask: ids, and rows of f32 per
// id (`what`: the second input's name) of a block of attr `rows` rows.
// Returns those rows.
StatusOr<int64_t> check_rows_per_id(const Attrs& attrs, std::span<const TensorMeta> in, const char* op,
                                    const char* what) {
  RILL_RETURN_IF_ERROR(check_ids(in[0], op));
  const int64_t rows = attrs.get_int("rows", -1);
  if (rows < 1) return invalid_argument("op '{}': attr rows must be >= 1, got {}", op, rows);
  RILL_RETURN_IF_ERROR(rows_of(attrs, rows, op).status());
  const TensorMeta& x = in[1];
  if (x.dtype != DType::kF32 || x.shape.size() != in[0].shape.size() + 1 ||
      !std::equal(in[0].shape.begin(), in[0].shape.end(), x.shape.begin()))
    return invalid_argument("op '{}': {} must be f32 shaped like ids {} plus one axis, got {} {}", op, what,
                            shape_string(in[0].shape), dtype_name(x.dtype), shape_string(x.shape));
  return rows;
}

Status infer_embedding_grad(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_ASSIGN_OR_RETURN(const int64_t rows, check_rows_per_id(attrs, in, "embedding_grad", "dout"));
  out->push_back({{rows, in[1].shape.back()}, DType::kF32});
  return {};
}

std::vector<SbpSignature> sbp_embedding(const Attrs&, std::span<const TensorMeta> in) {
  const Sbp B = Sbp::broadcast();
  const int rank = static_cast<int>(in[0].shape.size());
  std::vector<SbpSignature> sigs;
  for (int a = 0; a < rank; ++a) sigs.push_back({{Sbp::split(a), B}, {Sbp::split(a)}});
  sigs.push_back({{B, B}, {B}});
  sigs.push_back({{B, Sbp::split(1)}, {Sbp::split(rank)}});
  return sigs;
}

std::vector<SbpSignature> sbp_embedding_grad(const Attrs&, std::span<const TensorMeta> in) {
  const Sbp B = Sbp::broadcast();
  const int rank = static_cast<int>(in[0].shape.size());
  std::vector<SbpSignature> sigs;
  for (int a = 0; a < rank; ++a) sigs.push_back({{Sbp::split(a), Sbp::split(a)}, {Sbp::partial_sum()}});
  sigs.push_back({{B, B}, {B}});
  sigs.push_back({{B, Sbp::split(rank)}, {Sbp::split(1)}});
  sigs.push_back({{B, Sbp::partial_sum()}, {Sbp::partial_sum()}});  // linear in dout
  return sigs;
}

Status infer_embedding_mask(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_rows_per_id(attrs, in, "embedding_mask", "x").status());
  out->push_back(in[1]);
  return {};
}

// Row by row: ids and x split alike on an axis of the ids, or B with x split
// on its last axis or partial (linear in x).
std::vector<SbpSignature> sbp_embedding_mask(const Attrs&, std::span<const TensorMeta> in) {
  const Sbp B = Sbp::broadcast();
  const int rank = static_cast<int>(in[0].shape.size());
  std::vector<SbpSignature> sigs;
  for (int a = 0; a < rank; ++a) sigs.push_back({{Sbp::split(a), Sbp::split(a)}, {Sbp::split(a)}});
  sigs.push_back({{B, B}, {B}});
  sigs.push_back({{B, Sbp::split(rank)}, {Sbp::split(rank)}});
  sigs.push_back({{B, Sbp::partial_sum()}, {Sbp::partial_sum()}});
  return sigs;
}

Status grad_embedding_mask(GradBuilder& g) {
  const std::string dout = g.output_grad(0);
  if (dout.empty() || !g.needs_input_grad(1)) return {};
  g.set_input_grad(1, g.add_op("embedding_mask", {g.input(0), dout}, g.attrs())[0]);
  return {};
}

Status grad_embedding(GradBuilder& g) {
  const std::string dout = g.output_grad(0);
  if (dout.empty() || !g.needs_input_grad(1)) return {};
  Attrs attrs = g.attrs();  // a block's row_offset and total_rows
  attrs.set("rows", g.meta(g.input(1)).shape[0]);
  g.set_input_grad(1, g.add_op("embedding_grad", {g.input(0), dout}, std::move(attrs))[0]);
  return {};
}

Status bad_id(const char* op, int32_t id, int64_t position, int64_t rows) {
  return invalid_argument("op '{}': id {} at position {} is outside the table's {} rows", op, id, position, rows);
}

Status cpu_embedding(KernelContext& ctx) {
  const TensorView& ids = ctx.inputs[0];
  const TensorView& table = ctx.inputs[1];
  const int64_t rows = table.shape[0], dim = table.shape[1], n = ids.size();
  const EmbeddingParams& p = params_of<EmbeddingParams>(ctx);
  const Rows r{p.total_for(rows), p.row_offset};
  float* out = ctx.outputs[0].f32();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids.i32()[i];
    if (id < 0 || id >= r.total) return bad_id("embedding", id, i, r.total);
    const int64_t row = id - r.offset;
    if (row < 0 || row >= rows) {
      std::memset(out + i * dim, 0, static_cast<size_t>(dim) * sizeof(float));  // another block's row
      continue;
    }
    std::memcpy(out + i * dim, table.f32() + row * dim, static_cast<size_t>(dim) * sizeof(float));
  }
  return {};
}

Status cpu_embedding_grad(KernelContext& ctx) {
  const TensorView& ids = ctx.inputs[0];
  const float* dout = ctx.inputs[1].f32();
  TensorView& dtable = ctx.outputs[0];
  const int64_t rows = dtable.shape[0], dim = dtable.shape[1], n = ids.size();
  const EmbeddingParams& p = params_of<EmbeddingParams>(ctx);
  const Rows r{p.total_for(rows), p.row_offset};
  std::memset(dtable.data, 0, dtable.bytes());
  float* out = dtable.f32();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids.i32()[i];
    if (id < 0 || id >= r.total) return bad_id("embedding_grad", id, i, r.total);
    const int64_t row = id - r.offset;
    if (row < 0 || row >= rows) continue;  // another block's row
    for (int64_t d = 0; d < dim; ++d) out[row * dim + d] += dout[i * dim + d];
  }
  return {};
}

Status cpu_embedding_mask(KernelContext& ctx) {
  const TensorView& ids = ctx.inputs[0];
  const float* x = ctx.inputs[1].f32();
  const int64_t n = ids.size(), dim = ctx.inputs[1].shape.back();
  const EmbeddingParams& p = params_of<EmbeddingParams>(ctx);
  const int64_t rows = p.rows;
  const Rows r{p.total_for(rows), p.row_offset};
  float* out = ctx.outputs[0].f32();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids.i32()[i];
    if (id < 0 || id >= r.total) return bad_id("embedding_mask", id, i, r.total);
    const int64_t row = id - r.offset;
    if (row >= 0 && row < rows) std::memcpy(out + i * dim, x + i * dim, static_cast<size_t>(dim) * sizeof(float));
    else std::memset(out + i * dim, 0, static_cast<size_t>(dim) * sizeof(float));
  }
  return {};
}

// Ids (input 0) name rows of the whole table.
int64_t ids_bound(const Attrs& attrs, std::span<const TensorMeta> in, int input) {
  if (input != 0 || in[1].shape.empty()) return 0;
  const int64_t total = attrs.get_int("total_rows", 0);
  return total > 0 ? total : in[1].shape[0];
}

// embedding_grad reads the table's rows as its attr `rows` (or total_rows).
int64_t grad_ids_bound(const Attrs& attrs, std::span<const TensorMeta>, int input) {
  if (input != 0) return 0;
  const int64_t total = attrs.get_int("total_rows", 0);
  return total > 0 ? total : attrs.get_int("rows", 0);
}

}  // namespace

const OpDef kEmbeddingMaskOp = {
    .type = "embedding_mask",
    .num_inputs = 2,
    .num_outputs = 1,
    .infer = infer_embedding_mask,
    .sbp = sbp_embedding_mask,
    .grad = grad_embedding_mask,
    .cpu = cpu_embedding_mask,
    .cuda = "embedding_mask",
    .parse = parse_as<EmbeddingParams>,
    .index_bound = grad_ids_bound,
};

const OpDef kEmbeddingOp = {
    .type = "embedding",
    .num_inputs = 2,
    .num_outputs = 1,
    .infer = infer_embedding,
    .sbp = sbp_embedding,
    .grad = grad_embedding,
    .cpu = cpu_embedding,
    .cuda = "embedding",
    .parse = parse_as<EmbeddingParams>,
    .index_bound = ids_bound,
};

const OpDef kEmbeddingGradOp = {
    .type = "embedding_grad",
    .num_inputs = 2,
    .num_outputs = 1,
    .infer = infer_embedding_grad,
    .sbp = sbp_embedding_grad,
    .cpu = cpu_embedding_grad,
    .cuda = "embedding_grad",
    .parse = parse_as<EmbeddingParams>,
    .index_bound = grad_ids_bound,
};

}  // namespace rill
