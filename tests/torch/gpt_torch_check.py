#!/usr/bin/env python3
"""The GPT sample against PyTorch: the same model, the same batches, 10 AdamW
steps under a warmup-then-cosine schedule, losses compared step by step.

PyTorch (Debian's python3-torch, over the same OpenBLAS) builds the model of
samples/gpt/gpt_moby.json from the job file's own shapes, draws initial values,
and writes them as a Rill checkpoint at step 0 (model.safetensors, zero AdamW
moments). `rill run --resume` starts from them, with the data in order
(train.shuffle false), on the layouts given on the command line; PyTorch runs
the same 10 steps. Step k's loss of every layout must be within the bound
below of PyTorch's.

Every step clips the gradients to a global norm of 1 (their norms are 1.7 to
5.4), as torch.nn.utils.clip_grad_norm_ does.

The bound. Both sides compute in float32, in different summation orders
(GEMM blocking, pieces summed across devices, reductions), so a loss differs
by float rounding: relative gamma_n ~ n 6e-8 for sums of n terms, n up to
512 here (the MLP's inner size), about 3e-5 in the worst case and ~sqrt(n)
6e-8 ~ 1.4e-6 in practice, and the mean over 2048 rows averages further.
Steps compound it only through the weights: AdamW moves a weight by about lr
per step whatever its gradient's size, so a rounding flip in a near-zero
gradient component moves that weight by up to 2 lr, but along directions the
loss is flat in. Measured: at most 1.3e-7 relative over the 10 steps on
every layout. The bound, 2e-5 relative, is the worst case for one sum and
leaves 150x room for other CPUs' kernels; a wrong gradient, schedule or
decay rule moves the loss by 1e-3 or more within 3 steps.

    gpt_torch_check.py RILL SOURCE_ROOT LAYOUT...
LAYOUT: "cpu:1", "cpu:2" (data parallel over 2 devices), "nodes:2" (2 agents),
"stages:2" (2 pipeline stages on 2 agents, 2 micro-batches), "tp:2" (Megatron
tensor parallelism over 2 devices: samples/gpt/gpt_moby_tp.json), "hybrid:2"
(data parallel across 2 agents, Megatron over each one's 2 devices:
samples/gpt/gpt_moby_hybrid.json).
"""
import fnmatch
import json
import math
import os
import struct
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("skipped: no PyTorch for this python3 (Debian: apt-get install python3-torch; ./dev does)")
    sys.exit(77)

STEPS = 10
CLIP = 1.0  # the gradients' norm is 1.7-5.4 over these steps: every step clips
BOUND = 2e-5
OVERRIDES = ["train.shuffle=false", "train.log_every=1", f"train.steps={STEPS}",
             "optimizer.warmup_steps=3", "optimizer.decay_steps=8", "optimizer.min_lr=0.0005",
             f"optimizer.clip_grad_norm={CLIP}"]


def load_job(root):
    with open(os.path.join(root, "samples/gpt/gpt_moby.json")) as f:
        return json.load(f)


def write_checkpoint(initial, directory, job_name):
    """Step 0 in docs/CHECKPOINT_FORMAT.md's layout: every variable, zero moments."""
    tensors = []
    for name, value in initial.items():
        tensors += [(name, value), (name + "/adam_m", torch.zeros_like(value)), (name + "/adam_v", torch.zeros_like(value))]
    header, offset, blobs = {}, 0, []
    for name, value in tensors:
        data = value.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(value.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    header["__metadata__"] = {"optimizer": "adam"}
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    step = os.path.join(directory, "step-00000000")
    os.makedirs(step, exist_ok=True)
    with open(os.path.join(step, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    meta = {"format": 1, "step": 0, "job": job_name, "data": {"position": "step"},
            "optimizer": {"name": "adam", "states": ["adam_m", "adam_v"]},
            "tensors": [{"name": n, "shape": list(v.shape), "dtype": "F32",
                         "role": "optimizer_state" if "/" in n else "variable"} for n, v in tensors]}
    with open(os.path.join(step, "meta.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(directory, "latest"), "w") as f:
        f.write("step-00000000\n")
    return step


def lr_at(opt, step):
    lr, warmup, decay, floor = opt["lr"], 3, 8, 0.0005
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= decay:
        return floor
    ratio = (step - warmup) / (decay - warmup)
    return floor + 0.5 * (1 + math.cos(math.pi * ratio)) * (lr - floor)


def torch_losses(job, model, root):
    ds = job["datasets"][0]
    with open(os.path.join(root, ds["path"]), "rb") as f:
        stream = torch.tensor(list(f.read()), dtype=torch.long)
    n = len(stream)
    begin, end = math.floor(ds["split"][0] * n), math.floor(ds["split"][1] * n)
    stream, t, b = stream[begin:end], ds["context"], job["train"]["batch_size"]
    opt = job["optimizer"]
    decay = [p for name, p in zip(model.names, (model.w(x) for x in model.names))
             if not any(fnmatch.fnmatchcase(name, pat) for pat in opt["no_decay"])]
    plain = [p for name, p in zip(model.names, (model.w(x) for x in model.names))
             if any(fnmatch.fnmatchcase(name, pat) for pat in opt["no_decay"])]
    adamw = torch.optim.AdamW([{"params": decay, "weight_decay": opt["weight_decay"]},
                               {"params": plain, "weight_decay": 0.0}],
                              lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=1e-8)
    losses, norms = [], []
    for step in range(STEPS):
        rows = [stream[(step * b + r) * t:(step * b + r) * t + t + 1] for r in range(b)]
        batch = torch.stack(rows)
        for group in adamw.param_groups:
            group["lr"] = lr_at(opt, step)
        adamw.zero_grad()
        loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        norms.append(norm.item())
        adamw.step()
        losses.append(loss.item())
    if min(norms) <= CLIP:
        sys.exit(f"gradient norms {norms}: a step without clipping would not test it")
    return losses


def rill_losses(rill, root, work, layout, initial):
    metrics = os.path.join(work, f"metrics-{layout.replace(':', '')}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    kind, count = layout.split(":")
    job_file = {"tp": "samples/gpt/gpt_moby_tp.json", "hybrid": "samples/gpt/gpt_moby_hybrid.json"}.get(
        kind, "samples/gpt/gpt_moby.json")
    with open(os.path.join(root, job_file)) as f:
        name = json.load(f)["name"]
    resume = write_checkpoint(initial, os.path.join(work, "ckpt-" + layout.replace(":", "")), name)
    args = [rill, "run", os.path.join(root, job_file), "--resume", resume]
    for o in OVERRIDES:
        args += ["--set", o]
    if kind not in ("cpu", "tp"):  # the master of a cluster writes job-1.jsonl in its log folder
        logdir = os.path.join(work, "logs-" + layout.replace(":", ""))
        os.makedirs(logdir, exist_ok=True)
        metrics = os.path.join(logdir, "job-1.jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        args += ["--logdir", logdir]
    else:
        args += ["--metrics", metrics]
    if kind in ("cpu", "tp"):
        args += ["--devices", "cpu:" + count]
    elif kind == "nodes":
        args += ["--nodes", count, "--devices", "cpu:1"]
    elif kind == "hybrid":
        args += ["--nodes", count, "--devices", "cpu:2"]
    elif kind == "stages":
        args += ["--nodes", count, "--devices", "cpu:1", "--set", f"pipeline.num_stages={count}",
                 "--set", "train.micro_batches=2"]
    run = subprocess.run(args, cwd=root, capture_output=True, text=True, errors="replace", timeout=900)
    if run.returncode != 0:
        sys.exit(f"{layout}: rill run failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
    with open(metrics) as f:
        # Step lines (a run's first line says where it starts; checkpoints have theirs).
        lines = [row for row in (json.loads(line) for line in f if line.strip()) if "step" in row]
    # The progress line and the metrics show the rate each step used.
    opt = load_job(root)["optimizer"]
    for line in lines:
        if abs(line["lr"] - lr_at(opt, line["step"] - 1)) > 1e-12:
            sys.exit(f"{layout}: step {line['step']}'s lr is {line['lr']}, the schedule's {lr_at(opt, line['step'] - 1)}")
    want_line = f"lr {lr_at(opt, 0):.4g}"
    if kind in ("cpu", "tp") and want_line not in run.stdout:
        sys.exit(f"{layout}: no '{want_line}' in the progress lines:\n{run.stdout}")
    return [line["loss"] for line in lines]


def main():
    rill, root, layouts = sys.argv[1], sys.argv[2], sys.argv[3:]
    if not os.path.exists(os.path.join(root, "data/moby-dick.txt")):
        print("skipped: no data/moby-dick.txt (./dev fetches it from the npm registry)")
        sys.exit(77)
    work = tempfile.mkdtemp(prefix="rill-gpt-torch-")
    try:
        check(rill, root, work, layouts)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check(rill, root, work, layouts):
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.join(root, "bench"))
    from torch_gpt import Gpt, block_shapes  # the one PyTorch model of the job's GPT
    job = load_job(root)
    shapes, layers, heads = block_shapes(job)
    model = Gpt(shapes, layers, heads)
    initial = {name: model.w(name).detach().clone().contiguous() for name in model.names}
    want = torch_losses(job, model, root)
    compare_layouts(want, layouts, lambda layout: rill_losses(rill, root, work, layout, initial), BOUND)


def compare_layouts(want, layouts, losses_of, bound):
    """Each layout's losses (losses_of(layout)) against PyTorch's, step by
    step, within `bound` relative; prints both and exits on the first miss."""
    print("torch   ", " ".join(f"{x:.6f}" for x in want))
    worst = 0.0
    for layout in layouts:
        got = losses_of(layout)
        if len(got) != STEPS:
            sys.exit(f"{layout}: {len(got)} losses, expected {STEPS}")
        rel = [abs(g - w) / abs(w) for g, w in zip(got, want)]
        print(f"{layout:8s}", " ".join(f"{x:.6f}" for x in got), f" max rel diff {max(rel):.2e}")
        worst = max(worst, max(rel))
        if max(rel) > bound:
            sys.exit(f"{layout}: step {rel.index(max(rel))} differs from PyTorch by {max(rel):.2e} (bound {bound})")
    print(f"ok: every layout within {bound} of PyTorch (largest {worst:.2e})")


if __name__ == "__main__":
    main()
