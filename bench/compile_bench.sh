#!/usr/bin/env bash
# Compile time and peak memory against ops x devices: a deep MLP
# (bench/deep_mlp.py, width 8, batch 8192) of about 250, 500 and 1,000
# forward ops, for several cluster shapes, each compiled by `rill plan
# --stats`. By default node 0's plan, as its agent compiles it (every agent
# compiles its own, at once; node 0's holds the sink and its Recvs); with
# `whole`, the whole plan as `rill plan` prints it. One run per cell (a
# compile is deterministic; the spread is the machine's): the compile's
# seconds (plan bytes made, before verification and printing), the
# process's peak RSS in MB (its baseline, with nothing compiled, is the
# first line), the plan's tasks and bytes. A cell that fails prints its
# error's first line.
#   bench/compile_bench.sh [layers="82 165 330"] [shapes="16:cpu:1 16:cpu:8 64:cpu:8 128:cpu:8"] [node|whole]
source "$(dirname "$0")/common.sh"
layers_list=${1:-"82 165 330"}
shapes=${2:-"16:cpu:1 16:cpu:8 64:cpu:8 128:cpu:8"}
which_plan=${3:-node}
node_flag=(--node 0)
[ "$which_plan" = whole ] && node_flag=()
echo "plan: $which_plan"
printf "%6s %8s %9s %9s %7s %9s %11s\n" ops devices shape seconds MB tasks plan_bytes
/usr/bin/time -f "%M" -o "$tmp/time" "$rill" --help > /dev/null
printf "%6s %8s %9s %9s %7s\n" 0 - baseline - $(($(cat "$tmp/time") / 1024))
for layers in $layers_list; do
  /usr/bin/python3 bench/deep_mlp.py "$tmp/deep.json" "$layers" 8 8192
  ops=$(/usr/bin/python3 -c "import json;print(len(json.load(open('$tmp/deep.json'))['ops']))")
  for shape in $shapes; do
    nodes=${shape%%:*}
    devices=${shape#*:}
    per_node=${devices#*:}
    if /usr/bin/time -f "%M" -o "$tmp/time" "$rill" plan "$tmp/deep.json" --nodes "$nodes" --devices "$devices" \
         "${node_flag[@]}" --stats > "$tmp/out" 2> "$tmp/err"; then
      # "compiled in S s: T tasks, R regsts, B plan bytes, ..."
      read -r _ _ seconds _ tasks _ _ _ bytes _ < "$tmp/out"
      printf "%6s %8s %9s %9s %7s %9s %11s\n" "$ops" $((nodes * per_node)) "${nodes}x$per_node" "$seconds" \
        $(($(tail -1 "$tmp/time") / 1024)) "$tasks" "$bytes"
    else
      printf "%6s %8s %9s  failed: %s\n" "$ops" $((nodes * per_node)) "${nodes}x$per_node" "$(head -1 "$tmp/err")"
    fi
  done
done
