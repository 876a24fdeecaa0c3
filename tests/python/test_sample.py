"""samples/python/train_gpt.py runs, and docs/PYTHON.md quotes it as it is."""

import os
import subprocess
import sys

from conftest import ROOT, need_moby


def test_the_sample_runs_and_the_page_quotes_it(tmp_path):
    need_moby()
    sample = os.path.join(ROOT, "samples", "python", "train_gpt.py")
    with open(sample) as f, open(os.path.join(ROOT, "docs", "PYTHON.md")) as page:
        assert f.read() in page.read()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, sample, "10", str(tmp_path / "saved")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "job 'gpt_moby_short' on 1 node(s) x 2 device(s)" in done.stdout
    assert "loss 5." in done.stdout and "The whale " in done.stdout
    assert "\x1b" not in done.stdout  # the model's bytes are escaped
    assert os.path.exists(tmp_path / "saved" / "step-00000010" / "model.safetensors")
