#include "runtime/python/python_common.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <optional>
#include <thread>

namespace rill::python {

py::array to_numpy(const Shape& shape, const std::vector<float>& values, bool i32) {
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  if (i32) {
    py::array_t<int32_t> out(dims);
    std::memcpy(out.mutable_data(), values.data(), values.size() * sizeof(float));
    return out;
  }
  py::array_t<float> out(dims);
  std::memcpy(out.mutable_data(), values.data(), values.size() * sizeof(float));
  return out;
}

std::vector<float> from_numpy(const std::string& name, const py::handle& given, bool i32, Shape* shape) {
  const py::array array = py::array::ensure(given);
  if (!array) {
    PyErr_Clear();
    throw Error(invalid_argument("'{}': expected an array of numbers (numpy), got {}", name,
                                 py::str(py::type::of(given)).cast<std::string>()));
  }
  const char kind = array.dtype().kind();
  // An i32 tensor takes int32 alone, so that no value is cut or rounded;
  // an f32 one any real numbers (float64 rounds, as torch's .float()).
  if (i32 ? !array.dtype().is(py::dtype::of<int32_t>()) : (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b'))
    throw Error(invalid_argument("'{}': {} tensor takes {}, not {}", name, i32 ? "an i32" : "an f32",
                                 i32 ? "an int32 array" : "an array of real numbers",
                                 py::str(array.dtype()).cast<std::string>()));
  auto fill = [&]<typename T>(const py::array_t<T, py::array::c_style | py::array::forcecast>& a) {
    shape->assign(a.shape(), a.shape() + a.ndim());
    std::vector<float> values(static_cast<size_t>(a.size()));
    if constexpr (std::is_same_v<T, int32_t>) std::memcpy(values.data(), a.data(), values.size() * sizeof(float));
    else std::copy(a.data(), a.data() + a.size(), values.begin());
    return values;
  };
  if (i32) return fill(py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(array));
  return fill(py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(array));
}

bool is_i32_variable(const graph::Job& job, const std::string& name) {
  for (const graph::Variable& v : job.variables)
    if (v.name == name) return v.dtype == DType::kI32;
  return false;
}

void LineQueue::push(std::string line) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.push_back(std::move(line));
  }
  cv_.notify_one();
}

void LineQueue::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_one();
}

bool LineQueue::wait(std::vector<std::string>* lines, int ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return closed_ || !lines_.empty(); });
  for (std::string& line : lines_) lines->push_back(std::move(line));
  lines_.clear();
  return closed_;
}

bool wait_releasing_gil(const std::function<void()>& work, LineQueue* lines, const py::object& on_line,
                        const std::function<void(int)>& stop) {
  std::exception_ptr failure;
  std::thread worker([&] {
    try {
      work();
    } catch (...) {
      failure = std::current_exception();
    }
    lines->close();
  });
  int interrupts = 0;
  std::optional<py::error_already_set> pending;
  // A Python exception: each Ctrl-C is passed on (the first stops the job
  // at a step boundary); anything else stops it too and is raised once it
  // has stopped.
  auto take = [&](py::error_already_set e) {
    if (e.matches(PyExc_KeyboardInterrupt)) {
      stop(++interrupts);
    } else if (!pending) {
      if (interrupts == 0) stop(1);
      pending = std::move(e);
    }
  };
  try {
    for (bool done = false; !done;) {
      std::vector<std::string> got;
      {
        py::gil_scoped_release free;
        done = lines->wait(&got, 100);
      }
      for (const std::string& line : got) {
        if (on_line.is_none() || pending) break;
        try {
          // A line is text the engine wrote; a byte that is not UTF-8 is replaced, not an error.
          on_line(py::reinterpret_steal<py::str>(
              PyUnicode_DecodeUTF8(line.data(), static_cast<Py_ssize_t>(line.size()), "replace")));
        } catch (py::error_already_set& e) {
          take(std::move(e));
        }
      }
      if (PyErr_CheckSignals() != 0) take(py::error_already_set());
    }
  } catch (...) {  // not Python's (memory, say): the job is stopped and waited for first
    stop(1);
    py::gil_scoped_release free;
    worker.join();
    throw;
  }
  {
    py::gil_scoped_release free;
    worker.join();
  }
  if (failure) std::rethrow_exception(failure);
  if (pending) throw std::move(*pending);
  return interrupts > 0;
}

}  // namespace rill::python
