// Eager evaluation of a job's forward ops on the host: each op's CPU kernel
// run once on whole tensors, in definition order, on the calling thread. No
// plan, no actors, no devices: what a trained model's inference needs when
// it is small (text generation on the master after training), and a
// reference for tests. Not for training: nothing is differentiated.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "graph/job.h"
#include "kernels/tensor.h"

namespace rill::eager {

// A host tensor that owns its bytes.
struct HostTensor {
  TensorMeta meta;
  std::vector<std::byte> bytes;

  static HostTensor of(TensorMeta meta);  // zeroed
  static HostTensor floats(Shape shape, const std::vector<float>& values);
  // A variable's value as checkpoints and run results hold it: f32 values,
  // or an i32 variable's ints as the floats' bits (a variable is one or the
  // other; a 16-bit `meta` is an error naming `name`).
  static StatusOr<HostTensor> variable(const std::string& name, TensorMeta meta, const std::vector<float>& values);
  TensorView view() const;  // writable through it: the tensor's owner decides
  const float* f32() const { return reinterpret_cast<const float*>(bytes.data()); }
  int32_t* i32() { return reinterpret_cast<int32_t*>(bytes.data()); }
};

using Tensors = std::map<std::string, HostTensor>;

// Runs the ops of `job` that `wanted` depends on, reading `given` (every
// input and variable they read), and returns every tensor they made. Errors
// name the op: an unknown type, a shape that does not infer, a tensor
// neither given nor made, a kernel's error (a bad id or label). `reuse`
// (optional): what an earlier run made, whose buffers the outputs of the
// same names and sizes take, zeroed, rather than fresh memory (a loop of
// forwards, as generation's, faults in no new pages). It is left empty,
// on success and on error; it must not be `given`.
StatusOr<Tensors> run_forward(const graph::Job& job, const Tensors& given, const std::vector<std::string>& wanted,
                              Tensors* reuse = nullptr);

}  // namespace rill::eager
