#!/usr/bin/env bash
# Context parallelism: the sample laid out along the sequence
# (samples/gpt_context, ring attention) at contexts 1,024 to 8,192, one
# sequence a step, on 1, 2 and 4 devices of one process, run in turn:
# tokens per second over the run's steps (median, min, max of the runs)
# and each split's ratio to one device, the ring balanced (the sample's
# marks: the zigzag order, compiler/ring_balance.h) and, beside it, in the
# sequence's natural order (the marks removed), with the balanced ring's
# ratio to the natural one; then the planned host memory a node needs
# (rill plan) with the sequence over 1, 2 and 4 agents of one device
# each, which is what one device holds.
#   bench/context_bench.sh [runs=3] [contexts="1024 2048 4096 8192"]
source "$(dirname "$0")/common.sh"
runs=${1:-3}
contexts=${2:-1024 2048 4096 8192}
cp samples/gpt_context/gpt_context_block.json "$tmp/"
for t in $contexts; do
  # The sample at context t: its inputs, positions and dataset follow.
  /usr/bin/python3 - "$t" "$tmp/ctx$t.json" <<'PY'
import json, os, sys
t, out = int(sys.argv[1]), sys.argv[2]
job = json.load(open("samples/gpt_context/gpt_context.json"))
for d in job["datasets"]:
    d["context"], d["path"] = t, os.path.abspath(d["path"])
for i in job["inputs"]:
    i["shape"] = [t]
for v in job["variables"]:
    if v["name"] == "wpe":
        v["shape"] = [t, v["shape"][1]]
job["train"]["batch_size"] = 1
json.dump(job, open(out, "w"))
for x in job["inputs"] + job["variables"]:
    x.pop("sequence_axis", None)
json.dump(job, open(out.replace(".json", "n.json"), "w"))
PY
done
steps_for() { echo $(( $1 <= 1024 ? 8 : $1 <= 2048 ? 4 : $1 <= 4096 ? 3 : 2 )); }
declare -A rates
for ((r = 0; r < runs; r++)); do
  for t in $contexts; do
    for layout in cpu:1 cpu:2 cpu:2n cpu:4 cpu:4n; do
      steps=$(steps_for "$t")
      devices=${layout%n} order=${layout#"$devices"}
      "$rill" run "$tmp/ctx$t$order.json" --devices "$devices" --steps "$steps" --set eval=off --set generate=off \
        --set train.log_every="$steps" --result "$tmp/r.json" > /dev/null
      rates[$t,$layout]+="$(/usr/bin/python3 -c "import json;print(json.load(open('$tmp/r.json'))['samples_per_sec'])") "
    done
  done
done
echo "tokens/s, one sequence a step, $(getconf _NPROCESSORS_ONLN) cores (median, min, max of $runs runs;"
echo "  ratio to cpu:1; 'natural': the ring unbalanced, and the balanced ring's ratio to it):"
for t in $contexts; do
  /usr/bin/python3 - "$t" "${rates[$t,cpu:1]}" "${rates[$t,cpu:2]}" "${rates[$t,cpu:2n]}" "${rates[$t,cpu:4]}" \
    "${rates[$t,cpu:4n]}" <<'PY'
import statistics, sys
t = int(sys.argv[1])
runs = [[float(x) * t for x in a.split()] for a in sys.argv[2:]]
one = statistics.median(runs[0])
cells = []
for name, r in zip(("cpu:1", "cpu:2", "cpu:2 natural", "cpu:4", "cpu:4 natural"), runs):
    m = statistics.median(r)
    cells.append(f"{name} {m:.0f} ({min(r):.0f}-{max(r):.0f}, {m / one:.2f}x)")
for k, balanced, natural in ((0, 1, 2), (1, 3, 4)):
    cells[natural] += f" balanced/natural {statistics.median(runs[balanced]) / statistics.median(runs[natural]):.2f}x"
print(f"  context {t:5d}: " + "; ".join(cells))
PY
done
echo "planned host memory of node 0 (one device a node), MiB:"
for t in $contexts; do
  line="  context $t:"
  for nodes in 1 2 4; do
    peak=$("$rill" plan "$tmp/ctx$t.json" --nodes "$nodes" --devices cpu:1 --node 0 --json |
      /usr/bin/python3 -c "import json,sys;s=sys.stdin.read();print(json.loads(s[s.index('{'):])['memory'][0]['peak_bytes'])")
    line+=" $nodes agent(s) $(( peak / 1048576 ))"
  done
  echo "$line"
done
