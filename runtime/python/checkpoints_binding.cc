// Checkpoints from Python: read as {name: numpy array} with the step, the
// job's name, each tensor's dtype on disk and the metadata; written from
// such a dict through the same store (atomic step folders, `latest`, keep
// the newest), so that `rill run --resume` and `rill convert` read them.
#include <map>
#include <optional>
#include <string>

#include <pybind11/stl.h>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/python/python_common.h"

namespace rill::python {
namespace {

py::dict read(const std::string& path) {
  Checkpoint checkpoint;
  {
    py::gil_scoped_release free;
    checkpoint = value_or_raise(read_checkpoint(path));
  }
  py::dict tensors, dtypes;
  for (const CheckpointTensor& t : checkpoint.tensors) {
    tensors[py::str(t.name)] = to_numpy(t.shape, t.values, t.dtype == DType::kI32);
    dtypes[py::str(t.name)] = dtype_name(t.dtype);
  }
  py::dict out;
  out["step"] = checkpoint.step;
  out["job"] = checkpoint.job;
  out["tensors"] = tensors;
  out["dtypes"] = dtypes;
  out["metadata"] = checkpoint.metadata;
  return out;
}

// `tensors`: name -> array, int32 arrays kept as i32; `dtypes` stores f32
// ones as bf16 or f16 (rounded), by name.
std::string write(const std::string& dir, const py::dict& tensors, int64_t step, const std::string& job, int keep,
                  const std::map<std::string, std::string>& dtypes, const std::map<std::string, std::string>& metadata) {
  Checkpoint checkpoint;
  checkpoint.step = step;
  checkpoint.job = job;
  checkpoint.metadata = metadata;
  for (const auto& [key, value] : tensors) {
    CheckpointTensor t;
    t.name = py::cast<std::string>(key);
    // Integer arrays are i32 tensors: int32 alone, so that no value is cut.
    const py::array array = py::array::ensure(value);
    const char kind = array ? array.dtype().kind() : 'f';
    const bool i32 = kind == 'i' || kind == 'u';
    if (i32 && !array.dtype().is(py::dtype::of<int32_t>()))
      throw Error(invalid_argument("'{}': an integer tensor is stored as i32: give an int32 array, not {}", t.name,
                                   py::str(array.dtype()).cast<std::string>()));
    t.values = from_numpy(t.name, value, i32, &t.shape);
    t.dtype = i32 ? DType::kI32 : DType::kF32;
    if (auto it = dtypes.find(t.name); it != dtypes.end()) {
      DType stored;
      if (!parse_dtype(it->second, &stored) || i32 || (stored != DType::kBF16 && stored != DType::kF16 &&
                                                       stored != DType::kF32))
        throw Error(invalid_argument("dtypes['{}'] = '{}': an f32 tensor is stored as f32, bf16 or f16", t.name,
                                     it->second));
      t.dtype = stored;
    }
    checkpoint.tensors.push_back(std::move(t));
  }
  for (const auto& [name, dtype] : dtypes)
    if (!tensors.contains(name)) throw Error(invalid_argument("dtypes names '{}', which is not a tensor", name));
  py::gil_scoped_release free;
  raise_if_error(write_checkpoint(dir, checkpoint, keep));
  return dir + "/" + checkpoint_step_name(step);
}

}  // namespace

void bind_checkpoints(py::module_& m) {
  m.def("read_checkpoint", &read, py::arg("path"));
  m.def("write_checkpoint", &write, py::arg("dir"), py::arg("tensors"), py::arg("step") = 0, py::arg("job") = "",
        py::arg("keep") = 3, py::arg("dtypes") = std::map<std::string, std::string>{},
        py::arg("metadata") = std::map<std::string, std::string>{});
}

}  // namespace rill::python
