#!/usr/bin/env python3
"""GPT-2 checkpoints between Hugging Face's layout and Rill's (`rill convert`,
runtime/checkpoint/hf_gpt2.h), against a GPT-2 written here in PyTorch with
Hugging Face's names and layout (GPT2LMHeadModel's state dict:
`transformer.` names, the fused Conv1D `attn.c_attn` stored [in, out],
`lm_head` tied to `wte`, the `attn.bias` buffer) on the GPT sample's
architecture (samples/gpt/gpt_moby.json: 4 layers, 128 wide, 4 heads, a
vocabulary of 256 bytes, 128 positions):

- export: the sample trained 3 steps, converted --to hf-gpt2, loaded by the
  PyTorch model, gives the logits Rill's forward gives at step 4 (fetched
  with its input) within the bound below;
- import: the PyTorch model with fresh random weights, saved as Hugging Face
  saves it, converted --from hf-gpt2, resumed by `rill run` at step 0 (the
  imported weights, fresh optimizer state): Rill's logits of its first step
  are PyTorch's within the bound; converted back, every tensor is the saved
  one bit for bit;
- a file with an unknown tensor, without one, or with another shape is
  refused, naming the tensor.

The bound: both sides compute in f32 (torch and OpenBLAS sum in their own
orders); a logit is a dot product over 128 values of layer-normed
activations after 4 blocks, each rounding about 2^-24 relative per
operation, so the two differ by a few 1e-6 of the logits' scale (they are
O(1)); 1e-4 absolute plus 1e-4 relative is far above that and far below
any mistake of layout (a transposed or swapped tensor moves logits by
O(0.1)).

    hf_gpt2_check.py RILL SOURCE_ROOT
"""
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("skipped: no PyTorch for this python3 (Debian: apt-get install python3-torch; ./dev does)")
    sys.exit(77)

from safetensors_io import load, save  # noqa: E402 (after the torch check)

LAYERS, EMBD, HEADS, VOCAB, POSITIONS = 4, 128, 4, 256, 128
JOB = "samples/gpt/gpt_moby.json"


def gpt2_logits(sd, idx):
    """Hugging Face's GPT-2 forward (GPT2LMHeadModel, eval) from its state dict."""
    p = lambda name: sd["transformer." + name]
    B, T = idx.shape
    x = p("wte.weight")[idx] + p("wpe.weight")[:T]
    ln = lambda x, w: torch.nn.functional.layer_norm(x, (EMBD,), p(w + ".weight"), p(w + ".bias"), 1e-5)
    conv1d = lambda x, w: x @ p(w + ".weight") + p(w + ".bias")  # Conv1D: weight [in, out]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(LAYERS):
        h = f"h.{i}."
        q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(EMBD, dim=2)
        heads = lambda t: t.view(B, T, HEADS, EMBD // HEADS).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(EMBD // HEADS)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, EMBD)
        x = x + conv1d(y, h + "attn.c_proj")
        m = conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc")
        x = x + conv1d(torch.nn.functional.gelu(m, approximate="tanh"), h + "mlp.c_proj")
    return ln(x, "ln_f") @ sd["lm_head.weight"].T


def random_gpt2(seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape, std=0.02: torch.randn(*shape, generator=g) * std
    sd = {"transformer.wte.weight": r(VOCAB, EMBD), "transformer.wpe.weight": r(POSITIONS, EMBD, std=0.01)}
    for i in range(LAYERS):
        h = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            sd[h + ln + ".weight"] = 1 + r(EMBD, std=0.1)
            sd[h + ln + ".bias"] = r(EMBD, std=0.1)
        for name, shape in (("attn.c_attn", (EMBD, 3 * EMBD)), ("attn.c_proj", (EMBD, EMBD)),
                            ("mlp.c_fc", (EMBD, 4 * EMBD)), ("mlp.c_proj", (4 * EMBD, EMBD))):
            sd[h + name + ".weight"] = r(*shape)
            sd[h + name + ".bias"] = r(shape[1], std=0.05)
        sd[h + "attn.bias"] = torch.tril(torch.ones(POSITIONS, POSITIONS)).view(1, 1, POSITIONS, POSITIONS)
    sd["transformer.ln_f.weight"] = 1 + r(EMBD, std=0.1)
    sd["transformer.ln_f.bias"] = r(EMBD, std=0.1)
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    return sd


def run(args, root, fail_ok=False):
    done = subprocess.run(args, cwd=root, capture_output=True, text=True, errors="replace", timeout=600)
    if done.returncode != 0 and not fail_ok:
        sys.exit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def rill_logits(rill, root, tmp, resume, steps, name):
    """Rill's logits and their input at the run's last step (its forward before that step's update)."""
    result = os.path.join(tmp, name + ".json")
    job = json.load(open(os.path.join(root, JOB)))
    job["fetch"] = ["idx", "logits"]
    job.pop("checkpoint", None)
    fetching = os.path.join(tmp, "fetching.json")
    json.dump(job, open(fetching, "w"))
    run([rill, "run", fetching, "--resume", resume, "--steps", str(steps), "--result", result], root)
    fetched = json.load(open(result))["fetched"]
    idx = torch.tensor(fetched["idx"]["values"], dtype=torch.long).reshape(fetched["idx"]["shape"])
    logits = torch.tensor(fetched["logits"]["values"], dtype=torch.float32).reshape(fetched["logits"]["shape"])
    return idx, logits


def close(name, got, want):
    err = (got - want).abs().max().item()
    bound = 1e-4 + 1e-4 * want.abs().max().item()
    print(f"{name}: max |rill - torch| = {err:.2e} (bound {bound:.2e}), logits up to {want.abs().max().item():.2f}")
    if not err <= bound:
        sys.exit(f"{name}: logits differ by {err} > {bound}")


def main():
    rill, root = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="rill-hf-") as tmp:
        # Export: the trained sample into Hugging Face's layout.
        ck = os.path.join(tmp, "ck")
        run([rill, "run", JOB, "--steps", "3", "--set", "checkpoint.dir=" + ck], root)
        hf = os.path.join(tmp, "hf")
        run([rill, "convert", "--to", "hf-gpt2", ck, "--job", JOB, "-o", hf], root)
        config = json.load(open(os.path.join(hf, "config.json")))
        assert (config["n_layer"], config["n_embd"], config["n_head"], config["vocab_size"], config["n_positions"]) == \
            (LAYERS, EMBD, HEADS, VOCAB, POSITIONS), config
        assert config["activation_function"] == "gelu_new" and config["model_type"] == "gpt2", config
        sd = load(os.path.join(hf, "model.safetensors"))
        # The same model written short (attention with `heads`) converts
        # to the same files.
        short = os.path.join(tmp, "hf-short")
        run([rill, "convert", "--to", "hf-gpt2", ck, "--job", "samples/gpt/gpt_moby_short.json", "-o", short], root)
        assert json.load(open(os.path.join(short, "config.json"))) == config
        short_sd = load(os.path.join(short, "model.safetensors"))
        assert sorted(short_sd) == sorted(sd) and all(torch.equal(short_sd[k], sd[k]) for k in sd)
        sd["lm_head.weight"] = sd["transformer.wte.weight"]
        idx, want = rill_logits(rill, root, tmp, ck, 4, "export")
        with torch.no_grad():
            close("export", want, gpt2_logits(sd, idx))

        # Import: a fresh GPT-2 as Hugging Face saves it, trained from step 0.
        theirs = random_gpt2(7)
        src = os.path.join(tmp, "theirs")
        os.makedirs(src)
        save(os.path.join(src, "model.safetensors"), {k: v.to(torch.float32) for k, v in theirs.items()})
        json.dump({"model_type": "gpt2", "n_layer": LAYERS, "n_embd": EMBD, "n_head": HEADS},
                  open(os.path.join(src, "config.json"), "w"))
        imported = os.path.join(tmp, "imported")
        run([rill, "convert", "--from", "hf-gpt2", src, "--job", JOB, "-o", imported], root)
        idx, got = rill_logits(rill, root, tmp, imported, 1, "import")
        with torch.no_grad():
            close("import", got, gpt2_logits(theirs, idx))
        back = os.path.join(tmp, "back")
        run([rill, "convert", "--to", "hf-gpt2", imported, "--job", JOB, "-o", back], root)
        again = load(os.path.join(back, "model.safetensors"))
        for name, t in theirs.items():
            if name.endswith(".attn.bias") or name == "lm_head.weight":
                assert name not in again, name
                continue
            assert torch.equal(again[name], t), f"{name} differs after the round trip"
        assert len(again) == len(theirs) - LAYERS - 1, sorted(again)
        print(f"round trip: {len(again)} tensors bit for bit")

        # Refusals, each naming the tensor.
        def refused(tensors, expect, label):
            bad = os.path.join(tmp, label)
            os.makedirs(bad)
            save(os.path.join(bad, "model.safetensors"), tensors)
            done = run([rill, "convert", "--from", "hf-gpt2", bad, "--job", JOB, "-o", os.path.join(tmp, label + "-ck")],
                       root, fail_ok=True)
            said = done.stdout + done.stderr
            if done.returncode == 0 or expect not in said:
                sys.exit(f"{label}: expected a refusal saying {expect!r}, got ({done.returncode}):\n{said}")
            print(f"{label}: refused: {expect}")
        extra = dict(theirs)
        extra["transformer.h.0.attn.extra"] = torch.zeros(3)
        refused(extra, "unknown tensor 'h.0.attn.extra'", "unknown")
        missing = {k: v for k, v in theirs.items() if k != "transformer.h.2.mlp.c_fc.bias"}
        refused(missing, "no 'h.2.mlp.c_fc.bias'", "missing")
        wrong = dict(theirs)
        wrong["transformer.h.1.attn.c_proj.weight"] = torch.zeros(EMBD, EMBD + 1)
        refused(wrong, "'h.1.attn.c_proj.weight' is [128, 129]", "shape")
        # A file where the output folder belongs: refused, named.
        plain = os.path.join(tmp, "plain")
        open(plain, "w").write("x")
        done = run([rill, "convert", "--to", "hf-gpt2", ck, "--job", JOB, "-o", plain], root, fail_ok=True)
        if done.returncode != 1 or "cannot make the folder '" + plain + "'" not in done.stdout + done.stderr:
            sys.exit(f"export onto a file: expected a refusal naming it, got ({done.returncode}):\n{done.stderr}")
    print("ok")


if __name__ == "__main__":
    main()
