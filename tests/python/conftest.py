"""What the Python module's tests share: the tree, the `rill` binary, and
the sample data (a test that needs data the machine lacks is skipped,
naming it). Run by `meson test` (suite python) with PYTHONPATH on the
build folder's runtime/python."""

import json
import os
import subprocess

import pytest

# The `rill` runs a test compares with this process's own use the same
# OpenBLAS kernels (the command would otherwise pick better ones itself
# where OpenBLAS fell back to generic ones: kernels/ops/cpu_kernels_info.h).
if "OPENBLAS_CORETYPE" not in os.environ:
    import ctypes
    try:
        _blas = ctypes.CDLL("libopenblas.so.0")
        _blas.openblas_get_corename.restype = ctypes.c_char_p
        os.environ["OPENBLAS_CORETYPE"] = _blas.openblas_get_corename().decode()
    except OSError:
        pass  # no OpenBLAS of that name: the module's link says which it runs

ROOT = os.environ.get("RILL_SOURCE_ROOT", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
RILL = os.environ.get("RILL_BINARY", os.path.join(ROOT, "build", "rill"))
FASHION = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
MOBY = os.path.join(ROOT, "data", "moby-dick.txt")


@pytest.fixture(autouse=True)
def in_root(monkeypatch):
    """Sample jobs name their data relative to the tree's root."""
    monkeypatch.chdir(ROOT)


def need_fashion():
    if not os.path.exists(FASHION):
        pytest.skip(f"no Fashion-MNIST at {FASHION} (Debian's dataset-fashion-mnist)")


def need_moby():
    if not os.path.exists(MOBY):
        pytest.skip(f"no {MOBY} (./dev fetches it)")


def rill_run(job_path, *args):
    """`rill run JOB ARGS --result FILE`'s result JSON."""
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"rill-python-test-{os.getpid()}.json")
    try:
        subprocess.run([RILL, "run", job_path, *args, "--result", out], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, timeout=300)
        with open(out) as f:
            return json.load(f)
    finally:
        if os.path.exists(out):
            os.remove(out)
