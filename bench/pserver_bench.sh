#!/usr/bin/env bash
# Parameter servers vs collective training on the MLP of
# bench/mlp_synthetic.json (784-512-512-10) at global batch 512, one cpu
# device per node, 220 steps (samples/s after warm-up): pserver sync mode
# with 2 pservers and 2 trainers (4 local agents; variables sliced
# RoundRobin, the default) against collective mode on the 2 trainers alone
# (2 local agents, gradients all-reduced), and async mode on the same 4
# agents against sync. Runs alternate. Prints samples/s (median, min, max)
# and the ratios of medians. On this 2-core machine 4
# agents share 2 cores, so the pservers' updates and the trainers' compute
# compete for them; on machines of their own they would not.
#   bench/pserver_bench.sh [runs=3]
source "$(dirname "$0")/common.sh"
runs=${1:-3}
ps=()
coll=()
async=()
for ((r = 0; r < runs; r++)); do
  "$rill" run bench/mlp_synthetic.json --nodes 4 --apart --devices cpu:1 --ctrl-port $((19800 + 10 * r)) \
    --set train.batch_size=512 --set distributed.mode=pserver --set distributed.pservers=0,1 \
    --result "$tmp/ps.json" --logdir "$tmp" > /dev/null
  ps+=("$(steady_rate "$tmp/ps.json")")
  "$rill" run bench/mlp_synthetic.json --nodes 2 --apart --devices cpu:1 --ctrl-port $((19805 + 10 * r)) \
    --set train.batch_size=512 --result "$tmp/c.json" --logdir "$tmp" > /dev/null
  coll+=("$(steady_rate "$tmp/c.json")")
  "$rill" run bench/mlp_synthetic.json --nodes 4 --apart --devices cpu:1 --ctrl-port $((19808 + 10 * r)) \
    --set train.batch_size=512 --set distributed.mode=pserver --set distributed.pservers=0,1 \
    --set distributed.sync_mode=false --result "$tmp/a.json" --logdir "$tmp" > /dev/null
  async+=("$(steady_rate "$tmp/a.json")")
done
/usr/bin/python3 bench/summarize.py "pserver 2+2" "${ps[*]}" "collective 2" "${coll[*]}"
/usr/bin/python3 bench/summarize.py "async 2+2" "${async[*]}" "sync 2+2" "${ps[*]}"
