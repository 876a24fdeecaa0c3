"""The bubble of a pipeline, measured from a `rill run --trace` timeline:
for each device thread, the share of the time from the first act of step
`from_step` to the last act of the run that it was not acting. Prints it
per device beside the theory for S stages of equal work and M micro-batches,
(S - 1) / (M + S - 1), and the devices' acting time per step (what the
same work costs when the devices act at once). Then the ceiling of any
schedule of this work: no step can take less than the busiest device's
acting time, so the time per step over that is the most that streaming
micro-batches could gain over this run (run it on the stages taking turns).
  trace_bubble.py TRACE STAGES MICRO_BATCHES [from_step=2]
"""
import json
import sys

path, stages, micro = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
from_step = int(sys.argv[4]) if len(sys.argv) > 4 else 2
events = json.load(open(path))["traceEvents"]
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M"}
acts = [e for e in events if e["ph"] == "X"]
begin = min(e["ts"] for e in acts if e["args"]["step"] >= from_step)
end = max(e["ts"] + e["dur"] for e in acts)
busy = {}
for e in acts:
    lo, hi = max(e["ts"], begin), min(e["ts"] + e["dur"], end)
    if hi > lo:
        key = names[(e["pid"], e["tid"])]
        busy[key] = busy.get(key, 0.0) + hi - lo
theory = (stages - 1) / (micro + stages - 1)
steps = max(e["args"]["step"] for e in acts) + 1 - from_step
devices = [k for k in busy if k.startswith("cpu")]
print(f"acting time per step, all devices: {sum(busy[k] for k in devices) / steps / 1e6:.3f} s")
for thread in sorted(k for k in busy if k.startswith("cpu")):
    print(f"{thread:8s} idle {1 - busy[thread] / (end - begin):6.1%} of steps {from_step}+  "
          f"(theory for {stages} equal stages, {micro} micro-batches: {theory:.1%})")
step_seconds = (end - begin) / steps / 1e6
busiest = max(busy[k] for k in devices) / steps / 1e6
print(f"time per step {step_seconds:.3f} s, the busiest device acting {busiest:.3f} s of it: no schedule of "
      f"this work beats {step_seconds / busiest:.2f}x this run")
