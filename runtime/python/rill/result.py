"""Result: what a run or a submitted job gives back."""

import json

import numpy as np


class Result:
    """A job's result.

    json: the result as `rill run --result` writes it; data: that JSON
    parsed. losses: the loss of every step (numpy float64). metrics: the
    eval pass's metrics when the job has one, else the last step's;
    train_metrics: the last step's. variables and fetched: name -> numpy
    array, whole (a run in this process; a submitted job's result holds
    the values of variables of at most 64 elements, its model is in its
    checkpoint: rill.read_checkpoint). generated_bytes: what the job's
    `generate` section sampled; generated: the same as text, bytes that
    are not UTF-8 replaced (a submitted job's result holds only that). interrupted: stopped early (Ctrl-C, rill
    stop) at step `steps` of `planned_steps`.
    """

    def __init__(self, native, i32=()):
        self.json = native["json"]
        self.data = json.loads(self.json)
        d = self.data
        self.job_id = native.get("job_id", 0)
        self.status = d["status"]
        self.error = d.get("error", "")
        self.steps = d["steps"]
        self.planned_steps = d.get("planned_steps", self.steps)
        self.interrupted = bool(d.get("interrupted", False))
        self.losses = np.array([np.nan if v is None else v for v in d.get("loss_curve", [])], dtype=np.float64)
        self.final_loss = d.get("final_loss")
        self.metrics = dict(d.get("metrics", {}))
        self.train_metrics = dict(d.get("train_metrics", {}))
        self.samples_per_sec = d.get("samples_per_sec", 0.0)
        # A byte-level model writes any byte: the bytes, and as text with
        # what is not UTF-8 replaced (U+FFFD). A submitted job's come in its
        # result's JSON, already replaced.
        self.generated_bytes = native.get("generated", d.get("generated", "").encode())
        self.generated = self.generated_bytes.decode("utf-8", "replace")
        if "variables" in native:
            self.variables = dict(native["variables"])
            self.fetched = dict(native["fetched"])
        else:
            # The JSON holds an i32 variable's ints as the floats' bits.
            self.variables = {name: _values(v, name in i32) for name, v in d.get("variables", {}).items()
                              if "values" in v}
            self.fetched = {name: np.array(v["values"], dtype=np.float32).reshape(v["shape"])
                            for name, v in d.get("fetched", {}).items()}

    def __repr__(self):
        state = "interrupted" if self.interrupted else self.status
        return (f"<rill.Result {state}: {self.steps} steps, final loss {self.final_loss}, "
                f"{self.samples_per_sec:.1f} samples/s>")


def _values(v, i32):
    values = np.array(v["values"], dtype=np.float32).reshape(v["shape"])
    return values.view(np.int32) if i32 else values
