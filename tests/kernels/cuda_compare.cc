#include "tests/kernels/cuda_compare.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include <cuda_runtime_api.h>

#include "kernels/cuda_kernels.h"

namespace rill::cuda_test {

CudaContext& context() {
  static std::unique_ptr<CudaContext> ctx = [] {
    auto made = CudaContext::create(0);
    REQUIRE_MESSAGE(made.ok(), made.status().to_string());
    return std::move(*made);
  }();
  return *ctx;
}

namespace {

// Device copies of host tensors, freed with the object.
struct DeviceTensors {
  std::vector<void*> buffers;
  std::vector<TensorView> views;
  DeviceTensors(std::vector<Tensor> tensors) {
    for (Tensor& t : tensors) {
      TensorView v;
      v.shape = t.shape;
      v.dtype = t.dtype;
      REQUIRE(cudaMalloc(&v.data, std::max<size_t>(v.bytes(), 4)) == cudaSuccess);
      const void* host = t.view().data;
      if (v.bytes() > 0) REQUIRE(cudaMemcpy(v.data, host, v.bytes(), cudaMemcpyHostToDevice) == cudaSuccess);
      buffers.push_back(v.data);
      views.push_back(v);
    }
  }
  ~DeviceTensors() {
    for (void* p : buffers) (void)cudaFree(p);
  }
  void copy_back(std::vector<Tensor>* tensors) const {
    for (size_t i = 0; i < tensors->size(); ++i) {
      Tensor& t = (*tensors)[i];
      void* host = t.view().data;
      if (views[i].bytes() > 0)
        REQUIRE(cudaMemcpy(host, views[i].data, views[i].bytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
    }
  }
};

// Runs the CUDA kernel of `type` as an actor would: outputs shaped by the
// op's inference (and filled with NaN first, so unwritten elements show).
}  // namespace

GpuRun run_cuda(const std::string& type, std::vector<Tensor> inputs, const Attrs& attrs,
                const testing::RunOptions& options) {
  GpuRun run;
  const OpDef* def = find_op(type);
  REQUIRE(def);
  KernelFn kernel = find_cuda_kernel(type);
  const bool has_kernel = kernel != nullptr;
  REQUIRE_MESSAGE(has_kernel, "no CUDA kernel for " << type);
  std::vector<TensorMeta> metas, out_metas;
  for (const Tensor& t : inputs) metas.push_back(t.meta());
  REQUIRE(infer_op(*def, attrs, metas, &out_metas).ok());
  for (const TensorMeta& m : out_metas) {
    Tensor t = Tensor::zeros(m.shape, m.dtype);
    for (float& f : t.f32) f = std::nanf("");
    for (uint16_t& h : t.h16) h = 0xffff;  // NaN in bf16 and f16
    run.outputs.push_back(t);
  }
  std::vector<Tensor> state = options.state ? *options.state : std::vector<Tensor>{};
  DeviceTensors in(inputs), out(run.outputs), st(state);
  std::vector<Shape> logical = options.logical_inputs;
  for (size_t i = logical.size(); i < inputs.size(); ++i) logical.push_back(inputs[i].shape);
  KernelContext ctx;
  ctx.inputs = in.views;
  ctx.outputs = out.views;
  ctx.state = st.views;
  ctx.logical_inputs = logical;
  ctx.input_offsets = options.input_offsets;
  auto params = parse_params(*def, attrs);
  REQUIRE(params.ok());
  ctx.params = params->get();
  ctx.step = options.step;
  ctx.micro = options.micro;
  ctx.cuda = &context();
  run.status = kernel(ctx);
  Status synced = context().synchronize(type.c_str());
  if (run.status.ok()) run.status = synced;
  out.copy_back(&run.outputs);
  in.copy_back(&inputs);
  st.copy_back(&state);
  run.inputs = std::move(inputs);
  run.state = std::move(state);
  return run;
}

void check_close(const std::vector<float>& gpu, const std::vector<float>& cpu, const std::vector<double>* bound,
                 const std::string& what) {
  REQUIRE(gpu.size() == cpu.size());
  int bad = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double limit = bound ? (*bound)[i] : 1e-5 * std::max(1.0, std::abs(static_cast<double>(cpu[i])));
    const bool both_nan = std::isnan(gpu[i]) && std::isnan(cpu[i]);
    if (!both_nan && !(std::abs(static_cast<double>(gpu[i]) - cpu[i]) <= limit) && ++bad <= 3)
      FAIL_CHECK(what << "[" << i << "]: gpu " << gpu[i] << ", cpu " << cpu[i] << ", bound " << limit);
  }
  CHECK_MESSAGE(bad == 0, what);
}

// CPU and CUDA kernels of `type` on the same inputs; outputs (and, for
// updates, input 0 and the state) must agree within the elementwise bound.
void compare(const std::string& type, const std::vector<Tensor>& inputs, const Attrs& attrs,
             testing::RunOptions options) {
  CAPTURE(type);
  std::vector<Tensor> cpu_state = options.state ? *options.state : std::vector<Tensor>{};
  testing::RunOptions cpu_options = options;
  cpu_options.state = options.state ? &cpu_state : nullptr;
  std::vector<Tensor> cpu_inputs = inputs;
  const OpDef* def = find_op(type);
  REQUIRE(def != nullptr);
  auto cpu = testing::run_kernel(*def, cpu_inputs, attrs, cpu_options);
  REQUIRE_MESSAGE(cpu.ok(), cpu.status().to_string());
  GpuRun gpu = run_cuda(type, inputs, attrs, options);
  REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.to_string());
  for (size_t o = 0; o < cpu->size(); ++o) {
    check_close(gpu.outputs[o].f32, (*cpu)[o].f32, nullptr, type + " output");
    CHECK(gpu.outputs[o].i32 == (*cpu)[o].i32);
  }
  if (def->role == OpRole::kUpdate) {
    check_close(gpu.inputs[0].f32, cpu_inputs[0].f32, nullptr, type + " variable");
    for (size_t s = 0; s < cpu_state.size(); ++s) check_close(gpu.state[s].f32, cpu_state[s].f32, nullptr, type + " state");
  }
}

double gamma(int64_t n) { return n * kU / (1 - n * kU); }

}  // namespace rill::cuda_test
