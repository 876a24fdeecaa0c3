#!/usr/bin/env bash
# Compile time and peak memory against ops x devices: a deep MLP
# (bench/deep_mlp.py, width 8, batch 8192) of about 250, 500 and 1,000
# forward ops, for several cluster shapes, each compiled by `rill plan
# --stats`. By default node 0's plan, as its agent compiles it (every agent
# compiles its own, at once; node 0's holds the sink and its Recvs); with
# `whole`, the whole plan as `rill plan` prints it. Then the scale rows:
# about 10,000, 50,000 and 200,000 ops on each node (one device a node),
# the deep MLP and a chain of identity ops (bench/identity_chain.py). One
# run per cell (a compile is deterministic; the spread is the machine's):
# the compile's seconds (plan bytes made, before verification and
# printing), the seconds the memory plan of the node (of every node, with
# `whole`) takes as a run makes and checks it, the process's peak RSS in MB
# (its baseline, with nothing compiled, is the first line), the plan's
# tasks and bytes. A cell that fails prints its error's first line.
#   bench/compile_bench.sh [layers="82 165 330"] [shapes="16:cpu:1 16:cpu:8 64:cpu:8 128:cpu:8"] [node|whole]
#                          [scale_ops="10000 50000 200000"] [scale_shapes="1:cpu:1 16:cpu:1"]
source "$(dirname "$0")/common.sh"
layers_list=${1:-"82 165 330"}
shapes=${2:-"16:cpu:1 16:cpu:8 64:cpu:8 128:cpu:8"}
which_plan=${3:-node}
scale_ops=${4-"10000 50000 200000"}
scale_shapes=${5:-"1:cpu:1 16:cpu:1"}
node_flag=(--node 0)
[ "$which_plan" = whole ] && node_flag=()
echo "plan: $which_plan"
printf "%6s %-5s %8s %9s %9s %9s %7s %9s %11s\n" ops model devices shape seconds memory_s MB tasks plan_bytes
/usr/bin/time -f "%M" -o "$tmp/time" "$rill" --help > /dev/null
printf "%6s %-5s %8s %9s %9s %9s %7s\n" 0 - - baseline - - $(($(cat "$tmp/time") / 1024))

# One cell: JOB MODEL SHAPE (nodes:devices).
cell() {
  local job=$1 model=$2 shape=$3
  local nodes=${shape%%:*} devices=${shape#*:}
  local per_node=${devices#*:}
  local ops
  ops=$(/usr/bin/python3 -c "import json;print(len(json.load(open('$job'))['ops']))")
  if /usr/bin/time -f "%M" -o "$tmp/time" "$rill" plan "$job" --nodes "$nodes" --devices "$devices" \
       "${node_flag[@]}" --stats > "$tmp/out" 2> "$tmp/err"; then
    # "compiled in S s: T tasks, R regsts, B plan bytes, ..." and
    # "memory of N node(s) planned and checked in S s: ..."
    read -r _ _ seconds _ tasks _ _ _ bytes _ < "$tmp/out"
    memory=$(sed -n 's/^memory of .* planned and checked in \([0-9.]*\) s.*/\1/p' "$tmp/out")
    printf "%6s %-5s %8s %9s %9s %9s %7s %9s %11s\n" "$ops" "$model" $((nodes * per_node)) "${nodes}x$per_node" \
      "$seconds" "${memory:--}" $(($(tail -1 "$tmp/time") / 1024)) "$tasks" "$bytes"
  else
    printf "%6s %-5s %8s %9s  failed: %s\n" "$ops" "$model" $((nodes * per_node)) "${nodes}x$per_node" \
      "$(head -1 "$tmp/err")"
  fi
}

for layers in $layers_list; do
  /usr/bin/python3 bench/deep_mlp.py "$tmp/deep.json" "$layers" 8 8192
  for shape in $shapes; do cell "$tmp/deep.json" mlp "$shape"; done
done
for ops in $scale_ops; do
  /usr/bin/python3 bench/deep_mlp.py "$tmp/deep.json" $((ops / 3)) 8 8192
  /usr/bin/python3 bench/identity_chain.py "$tmp/chain.json" "$ops"
  for shape in $scale_shapes; do
    cell "$tmp/deep.json" mlp "$shape"
    cell "$tmp/chain.json" chain "$shape"
  done
done
