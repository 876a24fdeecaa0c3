"""How much of the gradients' all-reduce the backward hides, from a cluster
job's timeline (`rill submit --trace` or `rill run --nodes N --trace`): per
node, the time its gradients' all-reduce (acts named bucket:grad/... or
boxing:grad/...) ran while
one of its device threads was acting, over all the time they ran, from step
`from_step` on. 100% means every all-reduce ran under compute; what is not
hidden is time the step waits for the network.
  trace_overlap.py TRACE [from_step=2]
Prints one line per node and, last, `hidden NN.N%` for all nodes together.
"""
import json
import sys

path = sys.argv[1]
from_step = int(sys.argv[2]) if len(sys.argv) > 2 else 2
events = json.load(open(path))["traceEvents"]
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M"}
acts = [e for e in events if e["ph"] == "X" and e["args"].get("step", 0) >= from_step]


def merged(spans):
    out = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def covered(lo, hi, spans):
    return sum(max(0.0, min(hi, b) - max(lo, a)) for a, b in spans if a < hi and b > lo)


total_hidden = total = 0.0
for node in sorted({e["pid"] for e in acts}):
    mine = [e for e in acts if e["pid"] == node]
    compute = merged([(e["ts"], e["ts"] + e["dur"]) for e in mine
                      if names.get((node, e["tid"]), "").startswith(("cpu", "cuda"))])
    boxing = [(e["ts"], e["ts"] + e["dur"]) for e in mine if e["name"].startswith(("bucket:grad/", "boxing:grad/"))]
    busy = sum(hi - lo for lo, hi in boxing)
    hidden = sum(covered(lo, hi, compute) for lo, hi in boxing)
    total += busy
    total_hidden += hidden
    share = hidden / busy if busy else 0.0
    print(f"node {node}: all-reduce {busy / 1e3:.1f} ms, {share:.1%} of it under the node's compute")
print(f"hidden {total_hidden / total:.1%}" if total else "hidden n/a (no gradient boxing in the trace)")
