// rill.run: a job compiled and run in this process, as `rill run` runs it,
// on a thread of its own while Python waits with its GIL released; and
// text sampled from a trained byte-level model.
#include <atomic>
#include <optional>
#include <string>

#include <pybind11/stl.h>

#include "base/printable.h"
#include "runtime/cluster/job_runner.h"
#include "runtime/eager/generate.h"
#include "runtime/python/python_common.h"

namespace rill::python {
namespace {

py::dict arrays(const std::map<std::string, VariableValue>& values, const graph::Job* job) {
  py::dict out;
  for (const auto& [name, value] : values)
    out[py::str(name)] = to_numpy(value.shape, value.values, job != nullptr && is_i32_variable(*job, name));
  return out;
}

// The result as `rill run --result` writes it (json), with the variables
// and fetched tensors whole as numpy arrays.
py::dict run(const JobHandle& handle, const std::string& devices, int64_t steps, const std::string& resume,
             const py::object& on_line, const std::string& trace_file, const std::string& metrics_file,
             double stall_timeout_s) {
  JobRunOptions options;
  options.devices = devices;
  options.devices_from = "rill.run's devices";
  options.steps = steps;
  options.resume = resume;
  options.trace_file = trace_file;
  options.metrics_file = metrics_file;
  options.stall_timeout_s = stall_timeout_s;
  options.out = nullptr;  // lines go to on_line, on the caller's thread
  LineQueue lines;
  options.on_line = [&lines](const std::string& line) { lines.push(line); };
  std::atomic<bool> stop{false};
  options.stop = &stop;
  JobResult result;
  // A job in this process stops at a step boundary, however many Ctrl-Cs
  // come: nothing can end it sooner and leave the process whole.
  const bool interrupted = wait_releasing_gil([&] { result = run_job(handle.job, options); }, &lines, on_line,
                                              [&](int) { stop = true; });
  py::dict out;
  out["json"] = result_json(result);
  out["code"] = result.status.ok() ? "" : code_name(result.status.code());
  out["error"] = result.status.ok() ? "" : result.status.message();
  out["variables"] = arrays(result.variables, &handle.job);
  out["fetched"] = arrays(result.fetched, nullptr);
  out["generated"] = py::bytes(result.generated);  // a byte-level model's bytes, UTF-8 or not
  out["keyboard_interrupt"] = interrupted;
  return out;
}

py::bytes generate(const JobHandle& handle, const py::dict& given, std::optional<std::string> prompt,
                     std::optional<int64_t> tokens, std::optional<double> temperature, std::optional<int64_t> top_k,
                     std::optional<int64_t> seed) {
  const graph::Job& job = handle.job;
  if (!job.generate)
    throw Error(invalid_argument("job '{}' has no generate section: generate samples what its `generate.logits` "
                                 "says, fed through `generate.input`",
                                 job.name));
  graph::Generate config = *job.generate;
  if (prompt) config.prompt = *prompt;
  if (tokens) config.tokens = *tokens;
  if (temperature) config.temperature = *temperature;
  if (top_k) config.top_k = *top_k;
  if (seed) config.seed = *seed;
  if (config.tokens < 1 || config.tokens > 1000000)
    throw Error(invalid_argument("tokens={}: expected 1 to 1000000", config.tokens));
  if (!(config.temperature >= 0)) throw Error(invalid_argument("temperature={}: expected >= 0", config.temperature));
  if (config.top_k < 0) throw Error(invalid_argument("top_k={}: expected >= 0", config.top_k));
  eager::Tensors variables;
  for (const graph::Variable& v : job.variables) {
    if (!given.contains(v.name))
      throw Error(invalid_argument("generate: no value for variable '{}' of job '{}'", v.name, job.name));
    Shape shape;
    std::vector<float> values = from_numpy(v.name, given[py::str(v.name)], v.dtype == DType::kI32, &shape);
    if (!(shape == v.shape))
      throw Error(invalid_argument("generate: variable '{}' has shape {}, job '{}' declares {}", v.name,
                                   shape_string(shape), job.name, shape_string(v.shape)));
    variables[v.name] = value_or_raise(eager::HostTensor::variable(v.name, TensorMeta{shape, v.dtype}, values));
  }
  std::string text;
  {
    py::gil_scoped_release free;
    text = value_or_raise(eager::generate_text(job, variables, config));
  }
  return py::bytes(text);
}

}  // namespace

void bind_run(py::module_& m) {
  m.def("run", &run, py::arg("job"), py::arg("devices") = "", py::arg("steps") = 0, py::arg("resume") = "",
        py::arg("on_line") = py::none(), py::arg("trace") = "", py::arg("metrics") = "",
        py::arg("stall_timeout") = 60.0);
  m.def("generate", &generate, py::arg("job"), py::arg("variables"), py::arg("prompt") = py::none(),
        py::arg("tokens") = py::none(), py::arg("temperature") = py::none(), py::arg("top_k") = py::none(),
        py::arg("seed") = py::none());
  m.def("printable", [](const py::bytes& text) { return printable(std::string(text)); }, py::arg("text"),
        "Bytes a model wrote, safe to print on a terminal as the command line prints them: valid UTF-8, newlines "
        "and tabs kept, other control bytes and bytes that are not UTF-8 as \\xNN");
}

}  // namespace rill::python
