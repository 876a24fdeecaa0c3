#!/usr/bin/env bash
# Data parallelism across a network: Rill against PyTorch DDP (gloo), each on
# 2 nodes of the test bed (tests/net/net_bed.h: a network namespace per node,
# veth links through a bridge, rate-limited by tc's tbf both ways; no added
# latency: this kernel has no netem). The MLP of bench/mlp_synthetic.json,
# global batch 512, one thread per node; Rill as two keyed agents (sealed
# data plane, the default set-up), PyTorch as one rank in each namespace over
# its eth0. At each rate, runs alternate Rill and PyTorch on the same bed;
# prints samples/s (median, min, max) and the ratio of medians.
#   bench/net_bench.sh [runs=3] [rates="none 10gbit 1gbit 100mbit"]
# Needs root (namespaces) and a build (build/tests/net/netbed).
set -euo pipefail
cd "$(dirname "$0")/.."
rill=build/rill
netbed=build/tests/net/netbed
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
openblas_dir=/usr/lib/x86_64-linux-gnu/openblas-pthread
port=19950

# Steps per run at a rate: fewer where a step is mostly the link's time.
steps_at() { case "$1" in 100mbit) echo 60 ;; *) echo 220 ;; esac; }

# Inside the bed (netbed's command): agents up, then RUNS pairs of runs.
inside() {
  local runs=$1 steps=$2 tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  "$rill" keygen "$tmp/cluster.key" > /dev/null
  local key=(--key "$tmp/cluster.key") master="$NETBED_ADDR_0:$port"
  for n in 0 1; do
    local ns="NETBED_NS_$n"
    ${!ns} "$rill" agent --machines "$NETBED_MACHINES" --ctrl-port $port --rank $n "${key[@]}" --devices cpu:1 \
      --join-timeout 30 > "$tmp/agent$n.log" 2>&1 &
  done
  local formed=0
  for ((i = 0; i < 150; ++i)); do
    if $NETBED_NS_0 "$rill" status --master "$master" "${key[@]}" 2> /dev/null | grep -q "up (master)" &&
       ! $NETBED_NS_0 "$rill" status --master "$master" "${key[@]}" 2> /dev/null | grep -Eq "joining|not joined"; then
      formed=1
      break
    fi
    sleep 0.2
  done
  [ $formed = 1 ] || { echo "the cluster did not form:" >&2; cat "$tmp"/agent*.log >&2; return 1; }
  local warm=$((steps / 10)) timed=$((steps - steps / 10))
  for ((r = 0; r < runs; ++r)); do
    $NETBED_NS_0 "$rill" submit bench/mlp_synthetic.json --master "$master" "${key[@]}" --steps "$steps" \
      --set train.batch_size=512 --result "$tmp/r.json" > /dev/null
    echo "rill $(/usr/bin/python3 -c "import json;print(json.load(open('$tmp/r.json'))['steady_samples_per_sec'])")"
    $NETBED_NS_1 env LD_LIBRARY_PATH=$openblas_dir /usr/bin/python3 bench/torch_ddp.py $warm $timed 512 29500 1 \
      "$NETBED_ADDR_0" eth0 &
    local other=$!
    echo "torch $($NETBED_NS_0 env LD_LIBRARY_PATH=$openblas_dir /usr/bin/python3 bench/torch_ddp.py $warm $timed \
      512 29500 0 "$NETBED_ADDR_0" eth0 | /usr/bin/python3 -c "import json,sys;print(json.load(sys.stdin)['samples_per_sec'])")"
    wait $other
  done
  $NETBED_NS_0 "$rill" shutdown --master "$master" "${key[@]}" > /dev/null
  wait
}

if [ "${1:-}" = --inside ]; then
  inside "$2" "$3"
  exit
fi

runs=${1:-3}
rates=${2:-"none 10gbit 1gbit 100mbit"}
[ -x "$rill" ] && [ -x "$netbed" ] || { echo "build first: ./dev build" >&2; exit 1; }
echo "runs: $runs per rate; MLP 784-512-512-10, global batch 512, 2 nodes x 1 thread; torch BLAS: $openblas_dir"
for rate in $rates; do
  limit=()
  [ "$rate" = none ] || limit=(--rate "$rate")
  out=$("$netbed" --nodes 2 "${limit[@]}" -- bash "$0" --inside "$runs" "$(steps_at "$rate")")
  echo "== link: $rate ($(steps_at "$rate") steps a run)"
  /usr/bin/python3 bench/summarize.py "rill" "$(awk '$1 == "rill" {print $2}' <<< "$out" | xargs)" \
    "torch ddp" "$(awk '$1 == "torch" {print $2}' <<< "$out" | xargs)"
done
