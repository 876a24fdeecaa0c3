"""Jobs from Python: the builder writes what a job file says, and bad
input is a rill.Error naming what and where."""

import json

import numpy as np
import pytest

import rill
from conftest import need_fashion


def mlp_builder():
    """samples/mlp/mlp.json, written with the builder."""
    b = rill.JobBuilder("mlp")
    for split, prefix in (("train", "train"), ("test", "t10k")):
        b.dataset(name=split, kind="idx", images=f"/usr/share/datasets/fashion-mnist/{prefix}-images-idx3-ubyte.gz",
                  labels=f"/usr/share/datasets/fashion-mnist/{prefix}-labels-idx1-ubyte.gz",
                  scale=0.00392156862745098)
    x = b.input("x", "train", "image", [784])
    y = b.input("y", "train", "label", [], dtype="i32")
    h = x
    for i, (n_in, n_out) in enumerate(((784, 512), (512, 512), (512, 10)), start=1):
        w = b.variable(f"w{i}", [n_in, n_out], rill.init.xavier_uniform(i))
        bias = b.variable(f"b{i}", [n_out], rill.init.zeros())
        fc = b.matmul(h, w, name=f"fc{i}")
        h = b.bias_add(fc, bias, name="logits" if i == 3 else f"fc{i}_bias")
        if i < 3:
            h = b.relu(h, name=f"h{i}")
    loss = b.reduce_mean(b.sparse_softmax_cross_entropy(h, y, name="xent"), name="loss")
    b.metric("accuracy", b.accuracy(h, y, name="acc"))
    b.minimize(loss, rill.optim.momentum(0.03, 0.9))
    b.train(epochs=2, batch_size=256, log_every=50, seed=1)
    b.eval(dataset="test", batch_size=500)
    return b


def test_builder_writes_the_sample_job():
    built = mlp_builder().build()
    loaded = rill.load_job("samples/mlp/mlp.json")
    # The same job: job_to_json writes a checked job one way only.
    assert built.to_json() == loaded.to_json()


def test_builder_names_ops_as_the_cpp_builder():
    b = rill.JobBuilder("names")
    x = b.variable("x", [2])
    assert b.relu(x) == "relu_1"
    assert b.relu(x) == "relu_2"
    assert b.relu(x, name="relu_3") == "relu_3"
    assert b.relu(x) == "relu_4"
    assert b.layer_norm(x, x, x) == ["layer_norm_1:0", "layer_norm_1:1", "layer_norm_1:2"]
    # An op of several outputs takes its name too.
    assert b.layer_norm(x, x, x) == ["layer_norm_2:0", "layer_norm_2:1", "layer_norm_2:2"]


def test_overrides_as_a_list_or_a_dict():
    a = rill.load_job("samples/mlp/mlp.json", ["train.steps=7", "train.devices=cpu:2"])
    b = rill.load_job("samples/mlp/mlp.json", {"train.steps": 7, "train.devices": "cpu:2"})
    assert a.steps == b.steps == 7 and a.devices == "cpu:2"
    assert a.to_json() == b.to_json()


def test_job_json_round_trips():
    job = rill.load_job("samples/gpt/gpt_moby_short.json")
    again = rill.parse_job(job.to_json(), "again.json")
    assert again.to_json() == job.to_json()


def test_a_built_job_with_an_unknown_input_names_the_op():
    b = rill.JobBuilder("broken")
    x = b.variable("x", [2])
    b.minimize(b.reduce_sum(b.add(x, "nowhere", name="bad")), rill.optim.sgd(0.1))
    with pytest.raises(rill.Error) as e:
        b.build()
    assert "job 'broken' built in Python" in str(e.value)
    assert "bad" in str(e.value) and "nowhere" in str(e.value)
    assert e.value.code == "invalid argument"


def test_a_bad_job_file_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "name": "bad",\n  "ops": [\n    {"name": "a", "type": "no_such_op"}\n  ],\n  "loss": "a"\n}\n')
    with pytest.raises(rill.Error) as e:
        rill.load_job(path)
    assert f"{path}:4:" in str(e.value) and "no_such_op" in str(e.value)


def test_a_missing_file_is_not_found(tmp_path):
    with pytest.raises(rill.Error) as e:
        rill.load_job(tmp_path / "none.json")
    assert "none.json" in str(e.value)


def test_bad_devices_are_refused_before_a_run():
    need_fashion()
    with pytest.raises(rill.Error) as e:
        rill.run("samples/mlp/mlp.json", devices="tpu:2", on_line=None)
    assert "tpu:2" in str(e.value)
    assert e.value.result.status == "error"


def test_a_run_given_something_else_is_a_type_error():
    with pytest.raises(TypeError):
        rill.run(42)


def test_plan_summary_and_json():
    plan = rill.plan("samples/mlp/mlp.json", devices="cpu:2")
    assert "job 'mlp' on 1 node(s) x 2 device(s)" in plan["summary"]
    assert "memory planned per node" in plan["summary"]
    tasks = json.loads(plan["json"])["tasks"]
    assert len(tasks) > 10


def test_checkpoint_round_trip(tmp_path):
    tensors = {"w": np.arange(12, dtype=np.float32).reshape(3, 4) / 7, "count": np.array([3, -1], dtype=np.int32),
               "h": np.array([1.0, 1.0078125, 3.14159], dtype=np.float32)}
    step_dir = rill.write_checkpoint(str(tmp_path), tensors, step=5, job="j", dtypes={"h": "bf16"},
                                     metadata={"note": "x"})
    back = rill.read_checkpoint(step_dir)
    assert back["step"] == 5 and back["job"] == "j" and back["metadata"]["note"] == "x"
    assert back["dtypes"] == {"w": "f32", "count": "i32", "h": "bf16"}
    assert np.array_equal(back["tensors"]["w"], tensors["w"])
    assert back["tensors"]["count"].dtype == np.int32 and np.array_equal(back["tensors"]["count"], tensors["count"])
    # bf16 keeps 7 bits after the point: 1 + 2^-7 is exact, pi rounds to 3.140625.
    assert back["tensors"]["h"].tolist() == [1.0, 1.0078125, 3.140625]
    # The root reads its latest step.
    assert rill.read_checkpoint(str(tmp_path))["step"] == 5


def test_checkpoint_refusals(tmp_path):
    with pytest.raises(rill.Error) as e:
        rill.write_checkpoint(str(tmp_path), {"ids": np.array([1, 2], dtype=np.int64)})
    assert "'ids'" in str(e.value) and "int32" in str(e.value)
    with pytest.raises(rill.Error) as e:
        rill.write_checkpoint(str(tmp_path), {"w": "not an array"})
    assert "'w'" in str(e.value)
    with pytest.raises(rill.Error) as e:
        rill.write_checkpoint(str(tmp_path), {"w": np.zeros(2, np.float32)}, dtypes={"v": "bf16"})
    assert "'v'" in str(e.value)
    with pytest.raises(rill.Error) as e:
        rill.read_checkpoint(str(tmp_path / "absent"))
    assert e.value.code == "not found"


def test_printable_escapes_what_a_terminal_would_act_on():
    assert rill.printable(b"ok\n\x1b[2J\xff") == "ok\n\\x1b[2J\\xff"
    assert rill.printable("caf\u00e9\t") == "caf\u00e9\t"


def test_builder_attention_with_heads_is_the_job_files():
    b = rill.JobBuilder("att")
    b.dataset(name="d", kind="synthetic", num_samples=16, feature_shape=[6, 8], num_classes=8)
    x = b.input("x", "d", "features", [6, 8])
    y = b.input("y", "d", "label", [], dtype="i32")
    a = b.attention(x, x, x, heads=2, causal=True, name="a")
    last = b.reshape(b.slice(a, [0, 5, 0], [4, 6, 8]), [-1, 8])
    b.minimize(b.reduce_mean(b.sparse_softmax_cross_entropy(last, y)), rill.optim.sgd(0.1))
    b.train(steps=2, batch_size=4)
    job = json.loads(b.build().to_json())
    names = [op["name"] for op in job["ops"]]
    assert names[:9] == ["a.q_split", "a.q", "a.k_split", "a.k", "a.v_split", "a.v", "a.heads", "a.merge", "a"]
    fused = rill.JobBuilder("f")
    assert fused.attention("q", "k", "v") == ["attention_1:0", "attention_1:1"]
