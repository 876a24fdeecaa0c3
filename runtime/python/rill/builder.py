"""JobBuilder: a job written in Python as it reads on one device.

The builder records datasets, inputs, variables and ops as the job file
does (docs/JOB_FORMAT.md) and hands the result to the engine's loader, so
a built job is checked as a file is, with the same messages; build()
returns a rill.Job. Ops without a name get "<type>_<n>", the first n not
yet used, as the C++ rill::JobBuilder names them.

    b = rill.JobBuilder("mlp")
    b.dataset(name="train", kind="idx", images=..., labels=..., scale=1 / 255)
    x = b.input("x", "train", "image", [784])
    y = b.input("y", "train", "label", [], dtype="i32")
    w = b.variable("w", [784, 10], rill.init.xavier_uniform(1))
    logits = b.linear(x, w, b.variable("b", [10]), name="logits")
    b.minimize(b.reduce_mean(b.sparse_softmax_cross_entropy(logits, y)), rill.optim.sgd(0.1))
    job = b.build()
"""

import json


class init:
    """Initializers, as a variable's `init` in a job file."""

    @staticmethod
    def fill(value):
        return {"type": "fill", "value": value}

    @staticmethod
    def zeros():
        return init.fill(0)

    @staticmethod
    def uniform(low, high, seed):
        return {"type": "uniform", "low": low, "high": high, "seed": seed}

    @staticmethod
    def normal(mean, std, seed):
        return {"type": "normal", "mean": mean, "std": std, "seed": seed}

    @staticmethod
    def xavier_uniform(seed):
        return {"type": "xavier_uniform", "seed": seed}

    @staticmethod
    def kaiming_uniform(seed):
        return {"type": "kaiming_uniform", "seed": seed}


class optim:
    """Optimizers, as a job file's `optimizer`; more fields (a schedule,
    weight decay, clipping) as keywords."""

    @staticmethod
    def sgd(lr, **more):
        return {"type": "sgd", "lr": lr, **more}

    @staticmethod
    def momentum(lr, momentum=0.9, **more):
        return {"type": "momentum", "lr": lr, "momentum": momentum, **more}

    @staticmethod
    def adam(lr, beta1=0.9, beta2=0.999, epsilon=1e-8, **more):
        return {"type": "adam", "lr": lr, "beta1": beta1, "beta2": beta2, "epsilon": epsilon, **more}

    @staticmethod
    def adamw(lr, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.01, **more):
        return {"type": "adamw", "lr": lr, "beta1": beta1, "beta2": beta2, "epsilon": epsilon,
                "weight_decay": weight_decay, **more}


class Tensor(str):
    """A tensor of the job being built: its name."""


def _name(tensor):
    if not isinstance(tensor, str):
        raise TypeError(f"expected a tensor (its name), got {type(tensor).__name__}")
    return str(tensor)


def _sections(job, section, fields):
    """Keywords of a section, without those left as None (the default)."""
    job[section] = {k: v for k, v in fields.items() if v is not None}


class JobBuilder:
    def __init__(self, name):
        self._job = {"name": name, "datasets": [], "inputs": [], "variables": [], "ops": []}
        self._used = set()

    # The data and the model's tensors.

    def dataset(self, spec=None, **fields):
        """A dataset, as a job file's entry: a dict, or its fields as keywords."""
        self._job["datasets"].append({**(spec or {}), **fields})

    def input(self, name, dataset, field, shape, dtype="f32", sbp=None, placement=None):
        entry = {"name": name, "dataset": dataset, "field": field, "shape": list(shape), "dtype": dtype}
        _put(entry, sbp=sbp, placement=placement)
        self._job["inputs"].append(entry)
        self._used.add(name)
        return Tensor(name)

    def variable(self, name, shape, init=None, dtype="f32", sbp=None, trainable=True, placement=None):
        entry = {"name": name, "shape": list(shape), "dtype": dtype, "trainable": trainable}
        _put(entry, init=init, sbp=sbp, placement=placement)
        self._job["variables"].append(entry)
        self._used.add(name)
        return Tensor(name)

    def op(self, type, inputs, name=None, sbp=None, placement=None, recompute=None, **attrs):
        """Any op type with one output; its attributes as keywords."""
        return self._add(type, inputs, name, 1, sbp, placement, recompute, attrs)[0]

    def op_outputs(self, type, inputs, num_outputs, name=None, sbp=None, placement=None, recompute=None, **attrs):
        """Any op type with `num_outputs` outputs, named "<name>:<i>"."""
        return self._add(type, inputs, name, num_outputs, sbp, placement, recompute, attrs)

    def _add(self, type, inputs, name, num_outputs, sbp, placement, recompute, attrs):
        name = self._fresh(type, name)
        entry = {"name": name, "type": type, "inputs": [_name(t) for t in inputs]}
        outputs = [name] if num_outputs == 1 else [f"{name}:{i}" for i in range(num_outputs)]
        if num_outputs != 1:
            entry["outputs"] = outputs
        if attrs:
            entry["attrs"] = attrs
        if sbp is not None:
            entry["sbp"] = [sbp] if isinstance(sbp, str) else list(sbp)
        _put(entry, placement=placement, recompute=recompute)
        self._job["ops"].append(entry)
        self._used.update(outputs)
        return [Tensor(o) for o in outputs]

    def _fresh(self, type, name):
        if not name:
            n = 1
            while f"{type}_{n}" in self._used:
                n += 1
            name = f"{type}_{n}"
        self._used.add(name)
        return name

    # Op helpers: the common ops by name; op() takes any other.

    def matmul(self, a, b, transpose_a=False, transpose_b=False, **options):
        attrs = {k: v for k, v in (("transpose_a", transpose_a), ("transpose_b", transpose_b)) if v}
        return self.op("matmul", [a, b], **attrs, **options)

    def linear(self, x, w, bias=None, **options):
        return self.op("linear", [x, w] + ([bias] if bias is not None else []), **options)

    def add(self, a, b, **options):
        return self.op("add", [a, b], **options)

    def sub(self, a, b, **options):
        return self.op("sub", [a, b], **options)

    def mul(self, a, b, **options):
        return self.op("mul", [a, b], **options)

    def bias_add(self, x, bias, **options):
        return self.op("bias_add", [x, bias], **options)

    def relu(self, x, **options):
        return self.op("relu", [x], **options)

    def gelu(self, x, **options):
        return self.op("gelu", [x], **options)

    def tanh(self, x, **options):
        return self.op("tanh", [x], **options)

    def sigmoid(self, x, **options):
        return self.op("sigmoid", [x], **options)

    def softmax(self, x, **options):
        return self.op("softmax", [x], **options)

    def embedding(self, ids, table, **options):
        return self.op("embedding", [ids, table], **options)

    def layer_norm(self, x, gamma, beta, eps=None, **options):
        """y, and each row's mean and rstd (the gradient reads them)."""
        if eps is not None:
            options["eps"] = eps
        return self.op_outputs("layer_norm", [x, gamma, beta], 3, **options)

    def attention(self, q, k, v, heads=None, causal=False, scale=None, composed=False, **options):
        """With `heads`: multi-head attention on [B, T, C], split into heads
        and merged back (one output). Without: the fused op on [..., T, D],
        y and each row's log-sum-exp (two outputs)."""
        attrs = {k_: v_ for k_, v_ in (("causal", causal), ("scale", scale), ("composed", composed)) if v_}
        if heads is None:
            return self.op_outputs("attention", [q, k, v], 2, **attrs, **options)
        return self.op("attention", [q, k, v], heads=heads, **attrs, **options)

    def sparse_softmax_cross_entropy(self, logits, labels, **options):
        return self.op("sparse_softmax_cross_entropy", [logits, labels], **options)

    def mse_loss(self, prediction, target, reduction=None, **options):
        if reduction is not None:
            options["reduction"] = reduction
        return self.op("mse_loss", [prediction, target], **options)

    def reduce_sum(self, x, axes=None, keepdims=False, **options):
        return self.op("reduce_sum", [x], **_reduce_attrs(axes, keepdims), **options)

    def reduce_mean(self, x, axes=None, keepdims=False, **options):
        return self.op("reduce_mean", [x], **_reduce_attrs(axes, keepdims), **options)

    def reshape(self, x, shape, **options):
        return self.op("reshape", [x], shape=list(shape), **options)

    def transpose(self, x, perm, **options):
        return self.op("transpose", [x], perm=list(perm), **options)

    def identity(self, x, **options):
        return self.op("identity", [x], **options)

    def slice(self, x, starts, ends, **options):
        return self.op("slice", [x], starts=list(starts), ends=list(ends), **options)

    def concat(self, xs, axis, **options):
        return self.op("concat", list(xs), axis=axis, **options)

    def accuracy(self, logits, labels, **options):
        return self.op("accuracy", [logits, labels], **options)

    def scale(self, x, factor, **options):
        return self.op("scale", [x], scale=factor, **options)

    def all_reduce(self, x, reduce="sum", **options):
        return self.op("all_reduce", [x], reduce=reduce, **options)

    def all_gather(self, x, **options):
        return self.op("all_gather", [x], **options)

    def reduce_scatter(self, x, reduce="sum", **options):
        return self.op("reduce_scatter", [x], reduce=reduce, **options)

    # Layout.

    def group(self, name, placement, members):
        self._job.setdefault("groups", []).append(
            {"name": name, "placement": placement, "members": [_name(m) for m in members]})

    def pipeline(self, stages):
        self._job["pipeline"] = {"stages": list(stages)}

    def pipeline_stages(self, n, balance="params"):
        self._job["pipeline"] = {"num_stages": n, "balance": balance}

    # Training.

    def minimize(self, loss, optimizer):
        self._job["loss"] = _name(loss)
        self._job["optimizer"] = optimizer

    def metric(self, name, tensor):
        self._job.setdefault("metrics", []).append({"name": name, "tensor": _name(tensor)})

    def fetch(self, tensor):
        """The result carries `tensor`'s whole value at the last step."""
        self._job.setdefault("fetch", []).append(_name(tensor))

    def train(self, **fields):
        """The job's `train` section: steps or epochs, batch_size, devices, ..."""
        _sections(self._job, "train", fields)

    def eval(self, **fields):
        _sections(self._job, "eval", fields)

    def checkpoint(self, **fields):
        _sections(self._job, "checkpoint", fields)

    def generate(self, **fields):
        _sections(self._job, "generate", fields)

    def section(self, name, fields):
        """Any other top-level field of a job file, e.g. "distributed"."""
        self._job[name] = fields

    def to_json(self):
        """The job as job-file text: what build() checks; its errors' line
        numbers count in it."""
        return json.dumps(self._job, indent=2)

    def build(self, overrides=()):
        """The job, checked as a job file is (rill.Error names what is wrong)."""
        from . import _rill, _override_list
        return _rill.parse_job(self.to_json(), f"job '{self._job['name']}' built in Python",
                               _override_list(overrides))


def _put(entry, **fields):
    for key, value in fields.items():
        if value is not None:
            entry[key] = value


def _reduce_attrs(axes, keepdims):
    attrs = {}
    if axes is not None:
        attrs["axes"] = list(axes)
    if keepdims:
        attrs["keepdims"] = True
    return attrs
