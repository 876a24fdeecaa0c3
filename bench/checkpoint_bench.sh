#!/usr/bin/env bash
# What a checkpoint costs training: the GPT sample (samples/gpt/gpt_moby.json,
# 0.8 M parameters with AdamW's two states: 10 MB a checkpoint) on one node
# and on 2 agents, a checkpoint every EVERY steps. For each checkpoint the
# result JSON says how long training waited for it (block_ms: the copy into
# host memory at the step boundary, and any wait for room) and how long the
# node's write took in the background (write_ms: what a synchronous write
# would have blocked). Printed: their medians (min-max) and ratio, and the
# run's samples/s beside the same run without checkpoints, alternating.
#   bench/checkpoint_bench.sh [runs=3] [steps=120] [every=10]
set -euo pipefail
cd "$(dirname "$0")/.."
rill=build/rill
[ -x "$rill" ] || { echo "build first: ./dev build" >&2; exit 1; }
runs=${1:-3}
steps=${2:-120}
every=${3:-10}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
job=samples/gpt/gpt_moby.json
for layout in one two; do
  case $layout in
    one) where="--devices cpu:1" ;;
    two) where="--nodes 2 --apart --devices cpu:1 --ctrl-port 19876" ;;
  esac
  for ((r = 0; r < runs; r++)); do
    for mode in plain ckpt; do
      extra=""
      if [ "$mode" = ckpt ]; then
        rm -rf "$tmp/ckpt"
        extra="--set checkpoint.dir=$tmp/ckpt --set checkpoint.every=$every --set checkpoint.keep=2"
      fi
      # shellcheck disable=SC2086
      $rill run $job $where --steps "$steps" $extra --result "$tmp/$layout-$mode-$r.json" \
        > "$tmp/$layout-$mode-$r.log" 2>&1 || { cat "$tmp/$layout-$mode-$r.log"; exit 1; }
    done
  done
done
/usr/bin/python3 - "$tmp" "$runs" <<'PY'
import json, statistics, sys
tmp, runs = sys.argv[1], int(sys.argv[2])
def spread(xs):
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"
for layout, name in (("one", "1 node"), ("two", "2 agents")):
    block, write, sizes, rate = [], [], [], {"plain": [], "ckpt": []}
    for r in range(runs):
        for mode in rate:
            j = json.load(open(f"{tmp}/{layout}-{mode}-{r}.json"))
            rate[mode].append(j["samples_per_sec"])
            if mode == "ckpt":
                for c in j["checkpoints"]:
                    block.append(c["block_ms"])
                    write.append(c["write_ms"])
                    sizes.append(c["bytes"] / 1e6)
    print(f"{name}: {len(block)} checkpoints; training blocked {spread(block)} ms each, "
          f"the write {spread(write)} ms in the background "
          f"({statistics.median(write) / max(statistics.median(block), 1e-9):.0f}x the block), "
          f"{statistics.median(sizes):.1f} MB each")
    # GPT-2 124M with AdamW: 124.4 M parameters and two states, 4 bytes each.
    per_mb = statistics.median(block) / statistics.median(sizes)
    print(f"  at this copy rate ({per_mb:.3f} ms/MB) GPT-2 124M's 1493 MB would block {1493 * per_mb:.0f} ms")
    print(f"  samples/s without checkpoints {spread(rate['plain'])}, with {spread(rate['ckpt'])}: "
          f"{statistics.median(rate['ckpt']) / statistics.median(rate['plain']):.3f}x")
PY
