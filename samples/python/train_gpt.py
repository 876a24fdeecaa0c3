"""The GPT sample trained on Moby-Dick from Python, then sampled.

From the tree's root:
  PYTHONPATH=build/runtime/python python3 samples/python/train_gpt.py [STEPS [CHECKPOINT_DIR]]
"""
import sys

import rill

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
saved = sys.argv[2] if len(sys.argv) > 2 else "/tmp/gpt_moby_python"
job = rill.load_job("samples/gpt/gpt_moby_short.json", {"train.log_every": 100})
print(rill.plan(job, devices="cpu:2")["summary"])
result = rill.run(job, devices="cpu:2", steps=steps)  # Ctrl-C: stops at a step boundary
print(f"loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}, val {result.metrics['loss']:.3f}")
for name, value in list(result.variables.items())[:3]:
    print(name, value.shape, value.dtype, float(abs(value).mean()))
rill.write_checkpoint(saved, result.variables, step=result.steps, job=job.name)
text = rill.generate(job, result.variables, prompt="The whale ", tokens=120, temperature=0.8, raw=True)
print(rill.printable(text))  # a byte-level model writes any byte: escape the terminal's
