"""Runs from Python against `rill run`: the same job, the same devices, the
same bits. Both are this build's engine on this machine with the same
seeds and the same plan, so no rounding differs: the losses and the
variables compare exactly, under any OpenBLAS kernel."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import rill
from conftest import ROOT, need_fashion, need_moby, rill_run
from test_jobs import mlp_builder


def test_mlp_built_in_python_trains_as_rill_run():
    need_fashion()
    lines = []
    built = rill.run(mlp_builder(), devices="cpu:2", steps=20, on_line=lines.append)
    from_file = rill.run("samples/mlp/mlp.json", devices="cpu:2", steps=20, on_line=None)
    cli = rill_run("samples/mlp/mlp.json", "--devices", "cpu:2", "--steps", "20")
    assert built.status == "ok" and built.steps == 20 and len(built.losses) == 20
    assert built.losses.tolist() == cli["loss_curve"]
    assert built.metrics == cli["metrics"]
    for name, value in from_file.variables.items():
        assert value.dtype == np.float32 and value.shape == tuple(cli["variables"][name]["shape"])
        assert np.array_equal(built.variables[name], value), name
    # The progress lines came to the callback, on this thread.
    assert any(line.startswith("step     20/20") for line in lines)
    assert lines[-1].startswith("done: 20 steps")


def test_gpt_sample_trains_as_rill_run_and_samples_the_same_text():
    need_moby()
    settings = ["eval=off", "generate.tokens=40", "train.log_every=3"]
    result = rill.run("samples/gpt/gpt_moby.json", devices="cpu:2", steps=6, overrides=settings, on_line=None)
    cli = rill_run("samples/gpt/gpt_moby.json", "--devices", "cpu:2", "--steps", "6",
                   *[a for s in settings for a in ("--set", s)])
    assert result.losses.tolist() == cli["loss_curve"]
    assert result.data["generated"] == cli["generated"] and result.generated.startswith("Call me Ishmael. ")
    # Sampling again from the trained variables gives the run's bytes.
    job = rill.load_job("samples/gpt/gpt_moby.json", settings)
    assert rill.generate(job, result.variables, raw=True) == result.generated_bytes
    assert rill.generate(job, result.variables) == result.generated
    greedy = rill.generate(job, result.variables, prompt="The whale", tokens=10, temperature=0)
    assert greedy.startswith("The whale")


def test_generate_refusals():
    need_moby()
    job = rill.load_job("samples/gpt/gpt_moby.json")
    with pytest.raises(rill.Error) as e:
        rill.generate(job, {})
    assert "variable 'wte'" in str(e.value)
    with pytest.raises(rill.Error) as e:
        rill.generate(job, {"wte": np.zeros((3, 3), np.float32)})
    assert "'wte'" in str(e.value) and "[3, 3]" in str(e.value)
    with pytest.raises(rill.Error) as e:
        rill.generate(job, {"wte": np.array(["a", "b"])})
    assert "'wte'" in str(e.value) and "real numbers" in str(e.value)


def test_checkpoint_of_a_run_holds_its_variables(tmp_path):
    need_fashion()
    result = rill.run("samples/mlp/mlp.json", steps=5, on_line=None,
                      overrides={"checkpoint.dir": str(tmp_path), "eval": "off"})
    saved = rill.read_checkpoint(str(tmp_path))
    assert saved["step"] == 5
    for name, value in result.variables.items():
        assert np.array_equal(saved["tensors"][name], value), name


def test_an_exception_in_the_callback_stops_the_run_and_is_raised():
    need_fashion()
    seen = []

    def on_line(line):
        seen.append(line)
        if line.startswith("step"):
            raise ValueError("enough")

    with pytest.raises(ValueError, match="enough"):
        rill.run("samples/mlp/mlp.json", steps=100000, overrides={"train.log_every": 1, "eval": "off"},
                 on_line=on_line)
    # No line after the exception reached the callback.
    assert seen[-1].startswith("step")


@pytest.mark.parametrize("lines", ["callback", "none"])
def test_ctrl_c_stops_at_a_step_boundary(lines):
    """A SIGINT while the job runs, as a terminal's Ctrl-C sends it, in a
    process of its own, from another thread while this one waits in the
    engine: the run ends at a step boundary and says so. With no callback
    the wait hears it alone (PyErr_CheckSignals); with one, it may come
    while the callback runs."""
    need_fashion()
    script = textwrap.dedent("""
        import os, signal, sys, threading, time
        import rill
        with_lines = sys.argv[1] == "callback"
        first_step = threading.Event()
        def on_line(line):
            if line.startswith("step"):
                first_step.set()
        def interrupt():
            if with_lines:
                first_step.wait(120)
            else:
                time.sleep(2)  # the run is well under way: its start takes a fraction of that
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=interrupt, daemon=True).start()
        r = rill.run("samples/mlp/mlp.json", steps=100000, on_line=on_line if with_lines else None,
                     overrides={"train.log_every": 1, "eval": "off"})
        print("interrupted", r.interrupted, r.steps, r.planned_steps, len(r.losses))
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    done = subprocess.run([sys.executable, "-c", script, lines], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    assert words[:2] == ["interrupted", "True"], done.stdout
    steps, planned, losses = int(words[2]), int(words[3]), int(words[4])
    assert 0 <= steps < planned == 100000 and losses == steps
