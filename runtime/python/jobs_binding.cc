// rill.Job: a job loaded from a job file or built from Python's JobBuilder
// (sent as job-file text, so both are checked by the one loader, with its
// messages), and its plan's summary.
#include <map>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "runtime/cli/plan_stats.h"
#include "runtime/cluster/cluster_config.h"
#include "runtime/python/python_common.h"

namespace rill::python {
namespace {

JobHandle parse(const std::string& text, const std::string& file_name, const std::vector<std::string>& overrides) {
  return JobHandle{value_or_raise(graph::parse_job_json(text, file_name, overrides))};
}

JobHandle load(const std::string& path, const std::vector<std::string>& overrides) {
  py::gil_scoped_release free;
  return JobHandle{value_or_raise(graph::load_job_file(path, overrides))};
}

// The plan as a run on `nodes` nodes of `devices` each would compile it:
// its summary (`rill plan`'s) and the whole plan as JSON (`rill plan --json`).
py::dict plan(const JobHandle& handle, const std::string& devices, int nodes) {
  std::string summary, json;
  {
    py::gil_scoped_release free;
    graph::Job job = handle.job;
    auto cluster = value_or_raise(compiler::parse_devices(devices.empty() ? job.train.devices : devices, nodes));
    if (job.pserver_mode()) raise_if_error(resolve_distributed(&job, {}));
    auto bytes = value_or_raise(compiler::compile(job, cluster, compiler::CompileOptions{}));
    auto verified = value_or_raise(compiler::verify_plan(bytes));
    summary = plan_summary(*verified);
    json = compiler::plan_json(*verified);
  }
  py::dict out;
  out["summary"] = summary;
  out["json"] = json;
  return out;
}

}  // namespace

void bind_jobs(py::module_& m) {
  py::class_<JobHandle>(m, "Job", "A checked job, as a job file describes it")
      .def_property_readonly("name", [](const JobHandle& h) { return h.job.name; })
      .def_property_readonly("devices", [](const JobHandle& h) { return h.job.train.devices; })
      .def_property_readonly("steps", [](const JobHandle& h) { return h.job.train.steps; })
      .def_property_readonly("variable_dtypes",
                             [](const JobHandle& h) {
                               std::map<std::string, std::string> out;
                               for (const graph::Variable& v : h.job.variables) out[v.name] = dtype_name(v.dtype);
                               return out;
                             })
      .def("to_json", [](const JobHandle& h) { return value_or_raise(graph::job_to_json(h.job)); },
           "The job as job-file text, which parse_job reads back into the same job")
      .def("__repr__", [](const JobHandle& h) {
        return "<rill.Job '" + h.job.name + "': " + std::to_string(h.job.ops.size()) + " ops, " +
               std::to_string(h.job.variables.size()) + " variables>";
      });
  m.def("parse_job", &parse, py::arg("text"), py::arg("file_name"), py::arg("overrides") = std::vector<std::string>{},
        "Job-file text, checked; `file_name` labels errors; overrides as --set takes them");
  m.def("load_job", &load, py::arg("path"), py::arg("overrides") = std::vector<std::string>{},
        "A job file (its blocks' includes resolved), checked; overrides as --set takes them");
  m.def("plan", &plan, py::arg("job"), py::arg("devices") = "", py::arg("nodes") = 1);
}

}  // namespace rill::python
