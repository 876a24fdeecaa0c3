#include "tests/kernels/grad_check.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace rill::testing {

Tensor Tensor::floats(Shape shape, std::vector<float> values) {
  Tensor t;
  t.shape = std::move(shape);
  t.dtype = DType::kF32;
  t.f32 = std::move(values);
  return t;
}

Tensor Tensor::ints(Shape shape, std::vector<int32_t> values) {
  Tensor t;
  t.shape = std::move(shape);
  t.dtype = DType::kI32;
  t.i32 = std::move(values);
  return t;
}

Tensor Tensor::halves(Shape shape, DType dtype, const std::vector<float>& values) {
  Tensor t = zeros(std::move(shape), dtype);
  for (size_t i = 0; i < values.size() && i < t.h16.size(); ++i)
    t.h16[i] = dtype == DType::kBF16 ? BFloat16::from_float(values[i]).bits : Float16::from_float(values[i]).bits;
  return t;
}

std::vector<float> Tensor::as_floats() const {
  switch (dtype) {
    case DType::kF32: return f32;
    case DType::kI32: return std::vector<float>(i32.begin(), i32.end());
    case DType::kBF16:
    case DType::kF16: {
      std::vector<float> out;
      for (uint16_t b : h16)
        out.push_back(dtype == DType::kBF16 ? BFloat16::from_bits(b).to_float() : Float16::from_bits(b).to_float());
      return out;
    }
  }
  return {};
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  Tensor t;
  t.dtype = dtype;
  auto n = static_cast<size_t>(num_elements(shape));
  t.shape = std::move(shape);
  switch (dtype) {
    case DType::kF32: t.f32.assign(n, 0.0f); break;
    case DType::kI32: t.i32.assign(n, 0); break;
    case DType::kBF16:
    case DType::kF16: t.h16.assign(n, 0); break;
  }
  return t;
}

Tensor Tensor::uniform(Shape shape, uint64_t seed, float low, float high) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  Tensor t = zeros(std::move(shape));
  for (float& v : t.f32) v = dist(rng);
  return t;
}

TensorView Tensor::view() {
  TensorView v;
  v.shape = shape;
  v.dtype = dtype;
  switch (dtype) {
    case DType::kF32: v.data = f32.data(); break;
    case DType::kI32: v.data = i32.data(); break;
    case DType::kBF16:
    case DType::kF16: v.data = h16.data(); break;
  }
  return v;
}

namespace {

Status check_storage(const Tensor& t, const std::string& what) {
  size_t have = 0;
  switch (t.dtype) {
    case DType::kF32: have = t.f32.size(); break;
    case DType::kI32: have = t.i32.size(); break;
    case DType::kBF16:
    case DType::kF16: have = t.h16.size(); break;
  }
  if (have != static_cast<size_t>(t.size()))
    return invalid_argument("{}: shape {} needs {} values, the tensor holds {}", what, shape_string(t.shape),
                            t.size(), have);
  return {};
}

Tensor unset_tensor(const TensorMeta& meta) {
  Tensor t = Tensor::zeros(meta.shape, meta.dtype);
  // NaN / a sentinel: a kernel must write every element of its outputs.
  std::fill(t.f32.begin(), t.f32.end(), std::numeric_limits<float>::quiet_NaN());
  std::fill(t.i32.begin(), t.i32.end(), INT32_MIN + 12345);
  std::fill(t.h16.begin(), t.h16.end(), uint16_t{0xffff});  // NaN in bf16 and f16
  return t;
}

}  // namespace

StatusOr<std::vector<Tensor>> run_kernel(const OpDef& def, std::span<Tensor> inputs, const Attrs& attrs,
                                         const RunOptions& options) {
  std::vector<TensorMeta> metas;
  for (size_t i = 0; i < inputs.size(); ++i) {
    RILL_RETURN_IF_ERROR(check_storage(inputs[i], fmt::format("op '{}' input {}", def.type, i)));
    metas.push_back(inputs[i].meta());
  }
  std::vector<TensorMeta> out_metas;
  RILL_RETURN_IF_ERROR(infer_op(def, attrs, metas, &out_metas));
  if (def.cpu == nullptr) return internal_error("op '{}' has no CPU kernel", def.type);

  std::vector<Shape> logical = options.logical_inputs;
  if (logical.empty())
    for (const TensorMeta& m : metas) logical.push_back(m.shape);
  if (logical.size() != inputs.size())
    return invalid_argument("op '{}': {} logical shapes for {} inputs", def.type, logical.size(), inputs.size());

  std::vector<Tensor> outputs;
  if (options.outputs != nullptr) {
    outputs = *options.outputs;
    if (outputs.size() != out_metas.size())
      return invalid_argument("op '{}': {} outputs given for {}", def.type, outputs.size(), out_metas.size());
  } else {
    for (const TensorMeta& m : out_metas) outputs.push_back(unset_tensor(m));
  }

  std::vector<TensorView> in_views, out_views, state_views;
  for (Tensor& t : inputs) in_views.push_back(t.view());
  for (Tensor& t : outputs) out_views.push_back(t.view());
  if (def.num_state > 0) {
    if (options.state == nullptr || static_cast<int>(options.state->size()) != def.num_state)
      return invalid_argument("op '{}' needs {} state tensor(s) in RunOptions::state", def.type, def.num_state);
    for (Tensor& t : *options.state) state_views.push_back(t.view());
  }

  std::vector<std::byte> scratch;
  if (def.scratch_bytes != nullptr) scratch.assign(def.scratch_bytes(attrs, metas), std::byte{0xA5});

  KernelContext ctx;
  ctx.inputs = in_views;
  ctx.outputs = out_views;
  ctx.state = state_views;
  ctx.logical_inputs = logical;
  ctx.input_offsets = options.input_offsets;
  ctx.logical_output = options.logical_output;
  if (ctx.logical_output.empty() && !out_metas.empty()) ctx.logical_output = out_metas[0].shape;
  ctx.output_offset = options.output_offset;
  if (ctx.output_offset.empty()) ctx.output_offset.assign(ctx.logical_output.size(), 0);
  // Kernels read their params, parsed once here as a task does; only
  // initializers (which act once) read attrs, so the others get none: a
  // kernel that looked an attribute up by name would compute with its
  // default and fail its test.
  static const Attrs kNoAttrs;
  auto params = parse_params(def, attrs);
  if (!params.ok()) return params.status();
  ctx.attrs = def.role == OpRole::kInitializer ? &attrs : &kNoAttrs;
  ctx.params = params->get();
  ctx.step = options.step;
  ctx.micro = options.micro;
  ctx.scratch = scratch;
  RILL_RETURN_IF_ERROR(def.cpu(ctx));
  return outputs;
}

StatusOr<std::vector<Tensor>> run_op(const std::string& type, std::vector<Tensor> inputs, const Attrs& attrs,
                                     const RunOptions& options) {
  const OpDef* def = find_op(type);
  if (def == nullptr) return not_found("no op type '{}'", type);
  return run_kernel(*def, inputs, attrs, options);
}

// ---------------------------------------------------------------------------

EagerGradBuilder::EagerGradBuilder(const std::string& type, const Attrs& attrs, std::vector<Tensor> inputs,
                                   std::vector<Tensor> outputs, std::vector<std::optional<Tensor>> output_grads,
                                   std::vector<bool> needs_grad)
    : type_(type), attrs_(attrs), needs_grad_(std::move(needs_grad)) {
  needs_grad_.resize(inputs.size(), false);
  for (size_t i = 0; i < inputs.size(); ++i) {
    input_names_.push_back(fmt::format("in{}", i));
    tensors_[input_names_.back()] = std::move(inputs[i]);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    output_names_.push_back(fmt::format("out{}", i));
    tensors_[output_names_.back()] = std::move(outputs[i]);
    std::string grad_name;
    if (i < output_grads.size() && output_grads[i].has_value()) {
      grad_name = fmt::format("dout{}", i);
      tensors_[grad_name] = std::move(*output_grads[i]);
    }
    output_grad_names_.push_back(grad_name);
  }
}

const TensorMeta& EagerGradBuilder::meta(const std::string& tensor) const {
  auto it = tensors_.find(tensor);
  if (it == tensors_.end()) {
    if (status_.ok()) status_ = not_found("grad of '{}': meta() of unknown tensor '{}'", type_, tensor);
    return metas_[""];
  }
  return metas_[tensor] = it->second.meta();
}

std::string EagerGradBuilder::output_grad(int i) const { return output_grad_names_.at(i); }

std::vector<std::string> EagerGradBuilder::add_op(const std::string& type, std::vector<std::string> inputs,
                                                  Attrs attrs, int num_outputs) {
  added_ops_.push_back(type);
  std::vector<std::string> names;
  for (int k = 0; k < num_outputs; ++k) names.push_back(fmt::format("t{}", next_id_++));
  if (!status_.ok()) return names;
  std::vector<Tensor> args;
  for (const std::string& name : inputs) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      status_ = not_found("grad of '{}': op '{}' reads unknown tensor '{}'", type_, type, name);
      return names;
    }
    args.push_back(it->second);
  }
  auto outputs = run_op(type, std::move(args), attrs);
  if (!outputs.ok()) {
    status_ = outputs.status().with_context(fmt::format("grad of '{}'", type_));
    return names;
  }
  if (static_cast<int>(outputs->size()) != num_outputs) {
    status_ = internal_error("grad of '{}': op '{}' made {} outputs, the rule asked for {}", type_, type,
                             outputs->size(), num_outputs);
    return names;
  }
  for (int k = 0; k < num_outputs; ++k) tensors_[names[k]] = std::move((*outputs)[k]);
  return names;
}

void EagerGradBuilder::set_input_grad(int i, const std::string& grad) {
  if (i < 0 || i >= num_inputs()) {
    if (status_.ok()) status_ = internal_error("grad of '{}': set_input_grad({}) out of range", type_, i);
    return;
  }
  input_grads_[i] = grad;
}

const Tensor* EagerGradBuilder::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const Tensor* EagerGradBuilder::input_grad(int i) const {
  auto it = input_grads_.find(i);
  return it == input_grads_.end() ? nullptr : tensor(it->second);
}

// ---------------------------------------------------------------------------

namespace {

// sum_k sum(out_k * cotangent_k) in double.
StatusOr<double> weighted_sum(const std::string& type, const std::vector<Tensor>& inputs, const Attrs& attrs,
                              const std::vector<std::optional<Tensor>>& cotangents) {
  auto outputs = run_op(type, inputs, attrs);
  if (!outputs.ok()) return outputs.status();
  double total = 0.0;
  for (size_t k = 0; k < outputs->size(); ++k) {
    if (!cotangents[k].has_value()) continue;
    const auto& out = (*outputs)[k].f32;
    const auto& cot = cotangents[k]->f32;
    for (size_t j = 0; j < out.size(); ++j) total += static_cast<double>(out[j]) * cot[j];
  }
  return total;
}

}  // namespace

Status check_gradients(const std::string& type, const std::vector<Tensor>& inputs, const Attrs& attrs,
                       const std::vector<int>& which_inputs, const GradCheckOptions& options) {
  const OpDef* def = find_op(type);
  if (def == nullptr) return not_found("no op type '{}'", type);
  if (def->grad == nullptr) return invalid_argument("op '{}' has no gradient rule", type);
  return check_gradient_rule(type, def->grad, inputs, attrs, which_inputs, options);
}

Status check_gradient_rule(const std::string& type, GradFn rule_fn, const std::vector<Tensor>& inputs,
                           const Attrs& attrs, const std::vector<int>& which_inputs,
                           const GradCheckOptions& options) {
  if (rule_fn == nullptr) return invalid_argument("op '{}': no gradient rule to check", type);
  auto outputs = run_op(type, inputs, attrs);
  if (!outputs.ok()) return outputs.status().with_context("forward");

  std::vector<std::optional<Tensor>> cotangents;
  for (size_t k = 0; k < outputs->size(); ++k) {
    const Tensor& out = (*outputs)[k];
    if (out.dtype != DType::kF32 || static_cast<int>(k) >= options.differentiable_outputs) cotangents.emplace_back();
    else cotangents.push_back(Tensor::uniform(out.shape, options.seed + k));
  }

  std::vector<bool> needs_grad(inputs.size(), false);
  for (int i : which_inputs) {
    if (i < 0 || i >= static_cast<int>(inputs.size()))
      return invalid_argument("op '{}': no input {} to check", type, i);
    if (inputs[i].dtype != DType::kF32) return invalid_argument("op '{}': input {} is not f32", type, i);
    needs_grad[i] = true;
  }
  EagerGradBuilder builder(type, attrs, inputs, *outputs, cotangents, needs_grad);
  Status rule = rule_fn(builder);
  if (!rule.ok()) return rule.with_context(fmt::format("grad rule of '{}'", type));
  if (!builder.status().ok()) return builder.status();

  std::string report;
  int mismatches = 0;
  for (int i : which_inputs) {
    const Tensor* grad = builder.input_grad(i);
    if (grad == nullptr) return internal_error("op '{}': the grad rule set no gradient for input {}", type, i);
    if (grad->shape != inputs[i].shape || grad->dtype != DType::kF32)
      return internal_error("op '{}': gradient of input {} is {} {}, the input is {} f32", type, i,
                            shape_string(grad->shape), dtype_name(grad->dtype), shape_string(inputs[i].shape));
    std::vector<Tensor> probe = inputs;
    for (size_t j = 0; j < probe[i].f32.size(); ++j) {
      const float x = inputs[i].f32[j];
      const float hi = static_cast<float>(x + options.eps), lo = static_cast<float>(x - options.eps);
      probe[i].f32[j] = hi;
      auto plus = weighted_sum(type, probe, attrs, cotangents);
      probe[i].f32[j] = lo;
      auto minus = weighted_sum(type, probe, attrs, cotangents);
      probe[i].f32[j] = x;
      if (!plus.ok()) return plus.status();
      if (!minus.ok()) return minus.status();
      // Divide by the step the floats really took, not the nominal one.
      const double numeric = (*plus - *minus) / (static_cast<double>(hi) - lo);
      const double analytic = grad->f32[j];
      if (!(std::fabs(analytic - numeric) <= options.abs_tolerance + options.tolerance * std::fabs(numeric))) {
        if (mismatches++ < options.max_reported)
          report += fmt::format("\n  op '{}' input {} element {}: analytic {:.6g} vs numeric {:.6g}", type, i, j,
                                analytic, numeric);
      }
    }
  }
  if (mismatches > 0)
    return internal_error("op '{}': {} gradient element(s) disagree with finite differences:{}", type,
                          mismatches, report);
  return {};
}

Status check_gradients(const std::string& type, const std::vector<Tensor>& inputs, const Attrs& attrs,
                       const std::vector<int>& which_inputs, double tolerance) {
  GradCheckOptions options;
  options.tolerance = tolerance;
  options.abs_tolerance = tolerance;
  return check_gradients(type, inputs, attrs, which_inputs, options);
}

}  // namespace rill::testing
