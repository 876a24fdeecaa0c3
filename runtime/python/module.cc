// The native half of the Python module `rill` (runtime/python/rill/ is the
// package around it): jobs, runs in this process, a cluster's client,
// checkpoints. Every call that waits releases the GIL.
#include "kernels/ops/cpu_kernels_info.h"
#include "runtime/python/python_common.h"

PYBIND11_MODULE(_rill, m) {
  namespace py = pybind11;
  using rill::python::Error;
  m.doc() = "Rill's engine, for the Python package rill";
  static py::exception<Error> error(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      // The message, and the code's name ("invalid argument", "not found",
      // ...) as the exception's `code`.
      py::object instance = py::handle(error.ptr())(e.what());
      instance.attr("code") = e.code();
      PyErr_SetObject(error.ptr(), instance.ptr());
    }
  });
  rill::python::bind_jobs(m);
  rill::python::bind_run(m);
  rill::python::bind_client(m);
  rill::python::bind_checkpoints(m);
  // The OpenBLAS core OPENBLAS_CORETYPE should name before Python starts
  // ("" when OpenBLAS's own choice stands): the package warns on import.
  m.def("better_blas_core", &rill::better_blas_core);
}
