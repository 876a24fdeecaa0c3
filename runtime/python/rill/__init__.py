"""Rill from Python.

The engine stays C++ and the job stays a plan the engine compiles: this
package loads or builds jobs, runs them in this process or submits them to
a cluster's master, and reads and writes checkpoints as numpy arrays.
Every call that waits releases the GIL; a Ctrl-C during a run stops it at
the next step boundary, as on the command line (the result says
`interrupted`). Errors are rill.Error, whose message names what and where
and whose `code` names the kind ("invalid argument", "not found", ...).
docs/PYTHON.md has the tour.
"""

import os
import warnings

from . import _rill
from ._rill import Error, Job, read_checkpoint, write_checkpoint
from .builder import JobBuilder, Tensor, init, optim
from .result import Result

__all__ = ["Error", "Job", "JobBuilder", "Tensor", "init", "optim", "Result", "Client", "load_job", "parse_job",
           "run", "plan", "generate", "printable", "read_checkpoint", "write_checkpoint"]


if _rill.better_blas_core():
    # OpenBLAS chose its kernels as this process started: the `rill` command
    # runs itself again with the better ones; a Python process is the user's.
    warnings.warn(f"OpenBLAS does not know this CPU and runs its generic Prescott kernels; start Python with "
                  f"OPENBLAS_CORETYPE={_rill.better_blas_core()} for this CPU's (GEMMs 3-4x faster), as the rill "
                  f"command does itself", RuntimeWarning, stacklevel=2)


def _override_list(overrides):
    """--set assignments from a list of "section.field=value" or a dict."""
    if isinstance(overrides, dict):
        return [f"{k}={_text(v)}" for k, v in overrides.items()]
    if isinstance(overrides, str):
        return [overrides]
    return list(overrides)


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def load_job(path, overrides=()):
    """A job file, checked; overrides as `--set` takes them: ["train.steps=100"]
    or {"train.steps": 100}."""
    return _rill.load_job(os.fspath(path), _override_list(overrides))


def parse_job(text, file_name="job", overrides=()):
    """Job-file text, checked; `file_name` labels its errors."""
    return _rill.parse_job(text, file_name, _override_list(overrides))


def _job(job, overrides=()):
    if isinstance(job, Job):
        if overrides:
            return _rill.parse_job(job.to_json(), f"job '{job.name}'", _override_list(overrides))
        return job
    if isinstance(job, JobBuilder):
        return job.build(overrides)
    if isinstance(job, (str, os.PathLike)):
        return load_job(job, overrides)
    raise TypeError(f"expected a rill.Job, a JobBuilder or a job file's path, got {type(job).__name__}")


def run(job, devices="", steps=0, overrides=(), resume="", on_line=print, trace="", metrics="", stall_timeout=60.0):
    """Compiles and runs `job` (a Job, a JobBuilder or a job file's path) in
    this process, as `rill run` does; returns its Result. Progress lines go
    to `on_line` (None: none), called on this thread. A job that fails
    raises rill.Error with the result as its `result`."""
    native = _rill.run(_job(job, overrides), devices, steps, os.fspath(resume), on_line, os.fspath(trace),
                       os.fspath(metrics), stall_timeout)
    return _finish(native)


def _finish(native, i32=()):
    result = Result(native, i32)
    if native["code"]:
        error = Error(native["error"])
        error.code = native["code"]
        error.result = result
        raise error
    return result


def plan(job, devices="", nodes=1):
    """The plan a run on `nodes` nodes of `devices` each compiles: a dict with
    its "summary" (`rill plan`'s text) and "json" (`rill plan --json`)."""
    return _rill.plan(_job(job), devices, nodes)


def generate(job, variables, prompt=None, tokens=None, temperature=None, top_k=None, seed=None, raw=False):
    """Text sampled from a trained model of bytes or of GPT-2 tokens: the job's `generate`
    section, with the given fields in its place, over `variables` (name ->
    array: a result's variables, or a checkpoint's tensors). Text, bytes that
    are not UTF-8 replaced; with `raw`, the bytes."""
    out = _rill.generate(_job(job), variables, prompt, tokens, temperature, top_k, seed)
    return out if raw else out.decode("utf-8", "replace")


def printable(text):
    """Text a model wrote (str or bytes) made safe to print on a terminal,
    as the command line prints it: valid UTF-8, newlines and tabs kept,
    other control bytes and bytes that are not UTF-8 as \\xNN."""
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogateescape")
    return _rill.printable(bytes(text))


class Client:
    """A cluster's master, as `rill submit`, `status`, `stop` and `shutdown`
    reach it: "address[:port]" (default port 9988). The cluster's key is the
    file `key` names, else $RILL_KEY_FILE's, else the user's default key."""

    def __init__(self, master, key=None, answer_timeout=10.0):
        self._native = _rill.Client(master, answer_timeout, "" if key is None else os.fspath(key))

    def submit(self, job, devices="", steps=0, overrides=(), resume="", max_restarts=0, min_nodes=0, on_line=print,
               timeout=3600.0, replica_every=-1, replica_copies=0):
        """Runs `job` (a Job, a JobBuilder, or a job file's path, sent with its
        includes resolved) on the cluster; returns its Result once it ends.
        A Ctrl-C asks the master to stop it at the next step boundary."""
        if isinstance(job, (str, os.PathLike)):
            path = os.fspath(job)
            job = load_job(path)  # checked here first, with the file's lines
            native = self._native.submit(job.to_json(), path, devices, steps, _override_list(overrides), resume,
                                         max_restarts, min_nodes, on_line, timeout, replica_every,
                                         replica_copies)
        else:
            job = _job(job)
            native = self._native.submit(job, "job", devices, steps, _override_list(overrides), resume,
                                         max_restarts, min_nodes, on_line, timeout, replica_every,
                                         replica_copies)
        return _finish(native, {name for name, dtype in job.variable_dtypes.items() if dtype == "i32"})

    def status(self):
        """The cluster as a dict: nodes, devices, state, running and queued jobs."""
        import json
        return json.loads(self._native.status())

    def stop(self, job_id=0, now=False):
        """Stops job `job_id` (0: the running one) at the next step boundary
        (`now`: at once); what the master did, as a line."""
        return self._native.stop(job_id, now)

    def shutdown(self):
        """Stops every agent of the cluster."""
        self._native.shutdown()
