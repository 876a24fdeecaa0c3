// What the Python module's parts share: Rill's errors as the Python
// exception rill.Error, tensors as numpy arrays, and the wait for a job that
// runs on a thread of its own while Python keeps its GIL free, its signals
// heard and its callbacks on the calling thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "base/status.h"
#include "graph/job.h"
#include "runtime/node/node_runtime.h"

namespace rill::python {

namespace py = pybind11;

// Thrown by the bindings; the module turns it into rill.Error, whose
// message is the Status's and whose `code` is its code's name.
class Error : public std::runtime_error {
 public:
  explicit Error(const Status& status) : std::runtime_error(status.message()), code_(code_name(status.code())) {}
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

template <typename T>
T value_or_raise(StatusOr<T> result) {
  if (!result.ok()) throw Error(result.status());
  return std::move(*result);
}
inline void raise_if_error(const Status& status) {
  if (!status.ok()) throw Error(status);
}

// A job loaded or built, as Python holds it.
struct JobHandle {
  graph::Job job;
};

// A value as results and checkpoints hold it (f32 values; an i32 tensor's
// ints as the floats' bits) to a numpy array of its own shape: int32 when
// `i32`, else float32.
py::array to_numpy(const Shape& shape, const std::vector<float>& values, bool i32);
// The other way (`name` labels errors): with `i32` an int32 array, its ints
// as the floats' bits; else any real dtype, converted. Anything else is an
// error: no value is cut.
std::vector<float> from_numpy(const std::string& name, const py::handle& array, bool i32, Shape* shape);

// The dtype the job gives variable `name` (f32 for a name it does not know).
bool is_i32_variable(const graph::Job& job, const std::string& name);

// Progress lines from the job's thread to the calling thread.
class LineQueue {
 public:
  void push(std::string line);
  void close();
  // Waits up to `ms` for a line or the close; takes every line so far.
  // True once closed and drained.
  bool wait(std::vector<std::string>* lines, int ms);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;
  bool closed_ = false;
};

// Runs `work` on a thread of its own and waits for it with the GIL
// released, waking every 100 ms (or at a line) to hand `lines` to
// `on_line` (None: dropped) and to let Python run its signal handlers on
// this thread. Each KeyboardInterrupt (Ctrl-C) calls `stop` with how many
// came so far and the wait goes on: at the first the job ends at a step
// boundary and `work` returns. Any other exception, from a handler or from
// `on_line`, calls `stop(1)` too; it is raised once `work` has returned.
// Returns whether a Ctrl-C came. `work` must close `lines` when it returns.
bool wait_releasing_gil(const std::function<void()>& work, LineQueue* lines, const py::object& on_line,
                        const std::function<void(int)>& stop);

void bind_jobs(py::module_& m);
void bind_run(py::module_& m);
void bind_client(py::module_& m);
void bind_checkpoints(py::module_& m);

}  // namespace rill::python
