"""A cluster of two agents, real processes on 127.0.0.1 and 127.0.0.2,
driven from Python: status, a submitted job with its progress lines, a
refusal from the master as a rill.Error, stop, shutdown."""

import os
import subprocess
import time

import numpy as np
import pytest

import rill
from conftest import RILL, ROOT, need_fashion

PORT = 18720  # control; data on 18721


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    # A cluster key of this test's own for the agents, and its client key
    # for the client (Client(key=...)); no default key anywhere.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("RILL_KEY_FILE", raising=False)
    key, client_key = tmp_path / "cluster.key", tmp_path / "client.key"
    subprocess.run([RILL, "keygen", str(key), "--client", str(client_key)], check=True, stdout=subprocess.DEVNULL,
                   timeout=60)
    machines = f"127.0.0.1:{PORT},127.0.0.2:{PORT}"
    agents = [subprocess.Popen([RILL, "agent", "--machines", machines, "--rank", str(rank), "--devices", "cpu:1",
                                "--key", str(key), "--http", "off", "--log", str(tmp_path / f"agent{rank}.log")],
                               cwd=ROOT)
              for rank in (0, 1)]
    try:
        yield agents, client_key
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
            agent.wait(timeout=30)


def test_two_agents_driven_from_python(cluster):
    need_fashion()
    agents, client_key = cluster
    # Without the key, the master refuses; the key given is this client's
    # own, the environment left as it was.
    with pytest.raises(rill.Error) as e:
        rill.Client(f"127.0.0.1:{PORT}", answer_timeout=5).status()
    assert "RILL_KEY_FILE" not in os.environ
    client = rill.Client(f"127.0.0.1:{PORT}", key=client_key, answer_timeout=30)
    status = {}
    for _ in range(300):  # the cluster forms: up to 30 s
        status = client.status()
        if len(status.get("nodes", [])) == 2 and all(n["state"].startswith("up") for n in status["nodes"]):
            break
        time.sleep(0.1)
    assert [n["state"] for n in status["nodes"]] == ["up (master)", "up"], status

    lines = []
    settings = {"eval": "off", "train.log_every": 5}
    result = client.submit("samples/mlp/mlp.json", steps=20, overrides=settings, on_line=lines.append)
    assert result.status == "ok" and result.steps == 20 and result.job_id >= 1
    assert any(line.startswith("step     20/20") for line in lines), lines
    # Data parallel over two agents of one device each is data parallel
    # over two devices of one process: the same plan's sums in the same
    # order, so the same bits.
    local = rill.run("samples/mlp/mlp.json", devices="cpu:2", steps=20, overrides=settings, on_line=None)
    assert result.losses.tolist() == local.losses.tolist()
    assert np.array_equal(result.variables["b3"], local.variables["b3"])  # small variables come in the JSON

    # A job the master refuses (a dataset outside its data roots) is an
    # error naming it, raised here.
    b = rill.JobBuilder("outside")
    b.dataset(name="d", kind="text", path="/proc/self/environ", context=4)
    ids = b.input("ids", "d", "tokens", [4], dtype="i32")
    table = b.variable("table", [256, 2])
    b.minimize(b.reduce_mean(b.embedding(ids, table)), rill.optim.sgd(0.1))
    b.train(steps=1, batch_size=2)
    with pytest.raises(rill.Error) as e:
        client.submit(b, on_line=None)
    assert "/proc/self/environ" in str(e.value)

    assert "nothing to stop" in client.stop()
    client.shutdown()
    for agent in agents:
        assert agent.wait(timeout=30) == 0


def test_no_master_there_is_an_error():
    with pytest.raises(rill.Error) as e:
        rill.Client("127.0.0.1:18730", answer_timeout=2).status()
    assert "127.0.0.1:18730" in str(e.value)
