// rill.Client: a cluster's master from Python, as `rill submit`, `rill
// status`, `rill stop` and `rill shutdown` talk to it. A submit waits on a
// thread of its own with the GIL released; a Ctrl-C asks the master to stop
// the job at the next step boundary, as in `rill submit`.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "runtime/cluster/client.h"
#include "runtime/python/python_common.h"

namespace rill::python {
namespace {

class PyClient {
 public:
  PyClient(const std::string& master, double answer_timeout_s, const std::string& key_file) {
    py::gil_scoped_release free;
    client_ = value_or_raise(Client::connect(master, answer_timeout_s, /*running=*/true, 3.0, key_file));
  }

  // `job` is a rill.Job or job-file text (its includes resolved).
  py::dict submit(const py::object& job, const std::string& file_name, const std::string& devices, int64_t steps,
                  const std::vector<std::string>& overrides, const std::string& resume, int max_restarts,
                  int min_nodes, const py::object& on_line, double timeout_s, int64_t replica_every,
                  int replica_copies) {
    const Busy busy(this);
    SubmitOptions options;
    options.devices = devices;
    options.steps = steps;
    options.overrides = overrides;
    options.resume = resume;
    options.max_restarts = max_restarts;
    options.min_nodes = min_nodes;
    options.replica_every = replica_every;
    options.replica_copies = replica_copies;
    options.timeout_s = timeout_s;
    LineQueue lines;
    options.on_line = [&lines](const std::string& line) { lines.push(line); };
    std::atomic<int> interrupts{0};
    options.interrupts = &interrupts;
    const bool built = py::isinstance<JobHandle>(job);
    const graph::Job* handle = built ? &job.cast<const JobHandle&>().job : nullptr;
    const std::string text = built ? std::string() : job.cast<std::string>();
    StatusOr<SubmitResult> result = internal_error("no result");
    const bool interrupted = wait_releasing_gil(
        [&] { result = built ? client_->submit(*handle, options) : client_->submit_text(text, file_name, options); },
        &lines, on_line, [&](int count) { interrupts = count; });
    raise_if_error(result.status());
    py::dict out;
    out["json"] = result->result_json;
    out["code"] = result->status.ok() ? "" : code_name(result->status.code());
    out["error"] = result->status.ok() ? "" : result->status.message();
    out["job_id"] = result->job_id;
    out["keyboard_interrupt"] = interrupted;
    return out;
  }

  std::string status() { return call<std::string>([&] { return client_->status(); }); }
  std::string stop(int64_t job_id, bool now) { return call<std::string>([&] { return client_->stop(job_id, now); }); }
  void shutdown() {
    call<int>([&]() -> StatusOr<int> {
      RILL_RETURN_IF_ERROR(client_->shutdown());
      return 0;
    });
  }

 private:
  // One call at a time: a Client belongs to one thread (runtime/cluster/client.h).
  template <typename T, typename F>
  T call(F f) {
    const Busy busy(this);
    py::gil_scoped_release free;
    return value_or_raise(f());
  }

  // Set while a call runs (a callback of a submit may call back in, on the
  // same thread: refused, not waited for).
  std::atomic<bool> busy_{false};
  struct Busy {
    explicit Busy(PyClient* c) : client(c) {
      if (client->busy_.exchange(true))
        throw Error(Status(Code::kFailedPrecondition, "this rill.Client is busy with another call"));
    }
    ~Busy() { client->busy_ = false; }
    PyClient* client;
  };
  std::unique_ptr<Client> client_;
};

}  // namespace

void bind_client(py::module_& m) {
  py::class_<PyClient>(m, "Client")
      .def(py::init<const std::string&, double, const std::string&>(), py::arg("master"),
           py::arg("answer_timeout") = 10.0, py::arg("key") = "")
      .def("submit", &PyClient::submit, py::arg("job"), py::arg("file_name") = "job", py::arg("devices") = "",
           py::arg("steps") = 0, py::arg("overrides") = std::vector<std::string>{}, py::arg("resume") = "",
           py::arg("max_restarts") = 0, py::arg("min_nodes") = 0, py::arg("on_line") = py::none(),
           py::arg("timeout") = 3600.0, py::arg("replica_every") = -1,
           py::arg("replica_copies") = 0)
      .def("status", &PyClient::status)
      .def("stop", &PyClient::stop, py::arg("job_id") = 0, py::arg("now") = false)
      .def("shutdown", &PyClient::shutdown);
}

}  // namespace rill::python
