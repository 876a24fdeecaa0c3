#!/usr/bin/env bash
# Data parallelism across a network: Rill against PyTorch DDP (gloo), each on
# 2 nodes of the test bed (tests/net/net_bed.h: a network namespace per node,
# veth links through a bridge, rate-limited by tc's tbf both ways; no added
# latency: this kernel has no netem). The MLP of bench/mlp_synthetic.json,
# global batch 512, one thread per node; Rill as two keyed agents (sealed
# data plane, the default set-up), PyTorch as one rank in each namespace over
# its eth0. At each rate, runs alternate Rill and PyTorch on the same bed;
# prints samples/s (median, min, max) and the ratio of medians. At 1 Gbit/s
# and below also with 16-bit gradients: Rill's train.compression "bf16"
# (error feedback) against DDP's fp16_compress_hook (its bf16 hook needs
# NCCL), and against plain DDP; and Rill's "powersgd" (rank-8 factors with
# error feedback) against plain DDP (PyTorch 1.13's powerSGD_hook over gloo
# fails on the bed: its ranks' all-reduces fall out of step and gloo
# aborts). And for Rill the share of its gradients' all-reduce that ran
# under the backward, from one traced run.
# Then the all-reduce alone (bench/allreduce_bench.cc, one rank per node, over
# the bed's links), sealed (a cluster key) and unsealed, 4 KiB up to what the
# link carries in a few seconds: bus bandwidth as a share of the link's rate.
# Then the other modes against themselves unshaped: the MLP of
# samples/mlp/mlp_stages.json as 2 pipeline stages on 2 nodes (4
# micro-batches), and the MLP of bench/mlp_synthetic.json with 2 parameter
# servers and 2 trainers (4 nodes, sync mode).
# Then (part "gpt") the GPT sample (samples/gpt/gpt_moby.json: 4 layers,
# width 128, batch 16 of 128 tokens) on 2 agents against the same model in
# PyTorch DDP (bench/torch_gpt.py: AdamW, no clipping or schedule, random
# tokens), samples/s.
# Last (part "buckets", not run by default), Rill's data parallelism with
# gradient buckets of 1 MiB and 256 KiB, and sized by the link
# (train.buckets_by_link), against the default 25 MiB.
#   bench/net_bench.sh [runs=3] [rates="none 10gbit 1gbit 100mbit"] [parts="ddp allreduce modes gpt"]
# Needs root (namespaces) and a build (build/tests/net/netbed).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/same_blas.sh
rill=build/rill
netbed=build/tests/net/netbed
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
openblas_dir=/usr/lib/x86_64-linux-gnu/openblas-pthread
port=19950

# Steps per run at a rate: fewer where a step is mostly the link's time.
steps_at() { case "$1" in 100mbit) echo 60 ;; *) echo 220 ;; esac; }

# Inside the bed (netbed's command): a keyed agent in each namespace, one
# cpu device each; sets master and key, and tmp (removed by the caller).
start_cluster() {
  "$rill" keygen "$tmp/cluster.key" > /dev/null
  key=(--key "$tmp/cluster.key")
  master="$NETBED_ADDR_0:$port"
  for ((n = 0; n < NETBED_NODES; ++n)); do
    local ns="NETBED_NS_$n"
    ${!ns} "$rill" agent --machines "$NETBED_MACHINES" --ctrl-port $port --rank $n "${key[@]}" --devices cpu:1 \
      --join-timeout 30 > "$tmp/agent$n.log" 2>&1 &
  done
  for ((i = 0; i < 150; ++i)); do
    if $NETBED_NS_0 "$rill" status --master "$master" "${key[@]}" 2> /dev/null | grep -q "up (master)" &&
       ! $NETBED_NS_0 "$rill" status --master "$master" "${key[@]}" 2> /dev/null | grep -Eq "joining|not joined"; then
      return 0
    fi
    sleep 0.2
  done
  echo "the cluster did not form:" >&2
  cat "$tmp"/agent*.log >&2
  return 1
}

stop_cluster() {
  $NETBED_NS_0 "$rill" shutdown --master "$master" "${key[@]}" > /dev/null
  wait
}

# RUNS runs of one Rill job (submit's arguments after the job file's).
jobs_inside() {
  local runs=$1
  shift
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  start_cluster
  for ((r = 0; r < runs; ++r)); do
    $NETBED_NS_0 "$rill" submit "$@" --master "$master" "${key[@]}" --result "$tmp/r.json" > /dev/null
    echo "rate $(/usr/bin/python3 -c "import json;print(json.load(open('$tmp/r.json'))['steady_samples_per_sec'])")"
    /usr/bin/python3 -c "import json;b=json.load(open('$tmp/r.json')).get('buckets_by_link')
if b: print('buckets', b['bytes'], b['from_step'])"
  done
  stop_cluster
}

# RUNS pairs of runs: Rill and PyTorch DDP, and with COMPRESS both with
# 16-bit gradients.
inside() {
  local runs=$1 steps=$2 compress=$3
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  start_cluster
  local warm=$((steps / 10)) timed=$((steps - steps / 10))
  # One pair of runs: Rill with train.compression $1, PyTorch with HOOK=$2
  # (each run on a port of its own; a rank that fails ends its pair, named);
  # Rill's alone without $2.
  local torch_port=29500
  pair() {
    $NETBED_NS_0 "$rill" submit bench/mlp_synthetic.json --master "$master" "${key[@]}" --steps "$steps" \
      --set train.batch_size=512 --set train.compression="$1" --result "$tmp/r.json" > /dev/null
    echo "rill_$1 $(/usr/bin/python3 -c "import json;print(json.load(open('$tmp/r.json'))['steady_samples_per_sec'])")"
    [ -n "${2:-}" ] || return 0
    torch_port=$((torch_port + 1))
    local torch=(env HOOK="$2" LD_LIBRARY_PATH=$openblas_dir timeout 600 /usr/bin/python3 bench/torch_ddp.py $warm
                 $timed 512 $torch_port)
    $NETBED_NS_1 "${torch[@]}" 1 "$NETBED_ADDR_0" eth0 > "$tmp/torch1.log" 2>&1 &
    local other=$!
    $NETBED_NS_0 "${torch[@]}" 0 "$NETBED_ADDR_0" eth0 > "$tmp/torch0.log" 2>&1 || true
    wait $other || true
    local rate
    # Its JSON line, whatever else torch printed.
    rate=$(grep '"samples_per_sec"' "$tmp/torch0.log" | tail -1 |
      /usr/bin/python3 -c "import json,sys;print(json.load(sys.stdin)['samples_per_sec'])" 2> /dev/null) ||
      { echo "torch ddp failed:" >&2; cat "$tmp"/torch*.log >&2; return 1; }
    echo "torch_$1 $rate"
  }
  for ((r = 0; r < runs; ++r)); do
    pair none none
    if [ "$compress" = 1 ]; then
      pair bf16 fp16
      pair powersgd
    fi
  done
  # One more Rill run, traced: how much of its all-reduce the backward hid.
  $NETBED_NS_0 "$rill" submit bench/mlp_synthetic.json --master "$master" "${key[@]}" --steps "$steps" \
    --set train.batch_size=512 --trace "$tmp/trace.json" > /dev/null
  echo "hidden $(/usr/bin/python3 bench/trace_overlap.py "$tmp/trace.json" $warm | awk '$1 == "hidden" {print $2}')"
  stop_cluster
}

# RUNS pairs of runs of the GPT sample: Rill's, then PyTorch DDP's.
gpt_inside() {
  local runs=$1 steps=$2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  start_cluster
  local torch_port=29600 warm=$((steps / 10)) rate
  for ((r = 0; r < runs; ++r)); do
    $NETBED_NS_0 "$rill" submit samples/gpt/gpt_moby.json --master "$master" "${key[@]}" --steps "$steps" \
      --result "$tmp/r.json" > /dev/null
    echo "rill $(/usr/bin/python3 -c "import json;print(json.load(open('$tmp/r.json'))['steady_samples_per_sec'])")"
    torch_port=$((torch_port + 1))
    local torch=(env DDP_MASTER="$NETBED_ADDR_0" DDP_PORT=$torch_port GLOO_SOCKET_IFNAME=eth0
                 LD_LIBRARY_PATH=$openblas_dir timeout 900 /usr/bin/python3 bench/torch_gpt.py
                 samples/gpt/gpt_moby.json cpu $warm $((steps - warm)) 1)
    $NETBED_NS_1 env DDP_RANK=1 "${torch[@]}" > "$tmp/torch1.log" 2>&1 &
    local other=$!
    $NETBED_NS_0 env DDP_RANK=0 "${torch[@]}" > "$tmp/torch0.log" 2>&1 || true
    wait $other || true
    rate=$(grep '"samples_per_sec"' "$tmp/torch0.log" | tail -1 |
      /usr/bin/python3 -c "import json,sys;print(json.load(sys.stdin)['samples_per_sec'])" 2> /dev/null) ||
      { echo "torch gpt ddp failed:" >&2; cat "$tmp"/torch*.log >&2; return 1; }
    echo "torch $rate"
  done
  stop_cluster
}

# The largest all-reduce at a rate, and calls per size.
sizes_at() {
  local sizes="4096,65536,1048576,16777216"
  case "$1" in
    100mbit) echo "$sizes --iters 3" ;;
    1gbit) echo "$sizes,67108864 --iters 5" ;;
    *) echo "$sizes,67108864,268435456 --iters 5" ;;
  esac
}

# The link's rate in bytes/s ("" for none).
rate_bytes() {
  case "$1" in
    *gbit) echo $((${1%gbit} * 125000000)) ;;
    *mbit) echo $((${1%mbit} * 125000)) ;;
    *) echo "" ;;
  esac
}

allreduce_at() {
  local rate=$1 tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  "$rill" keygen "$tmp/cluster.key" > /dev/null
  local limit=()
  [ "$rate" = none ] || limit=(--rate "$rate")
  local bytes_per_s
  bytes_per_s=$(rate_bytes "$rate")
  for sealed in sealed unsealed; do
    local key=()
    [ $sealed = sealed ] && key=(--key "$tmp/cluster.key")
    # shellcheck disable=SC2046
    "$netbed" --nodes 2 "${limit[@]}" -- sh -c '$NETBED_NS_0 "$@" --addresses $NETBED_ADDR_0,$NETBED_ADDR_1' sh \
      build/bench/allreduce_bench --ranks 2 --rank-prefix-env NETBED_NS_ "${key[@]}" --warmup 1 \
      --sizes $(sizes_at "$rate") | awk -v rate="$bytes_per_s" -v sealed=$sealed '
        /^#/ { if ($2 == "bytes") printf "  %-9s %12s %11s %11s %9s\n", "", "bytes", "median_us", "busbw_GB/s", "of_link"; next }
        { share = rate == "" ? "-" : sprintf("%.0f%%", 100 * $7 * 1e9 / rate)
          printf "  %-9s %12s %11s %11s %9s\n", sealed, $1, $3, $7, share }'
  done
}

case "${1:-}" in
  --inside) inside "$2" "$3" "$4"; exit ;;
  --jobs-inside) shift; jobs_inside "$@"; exit ;;
  --gpt-inside) gpt_inside "$2" "$3"; exit ;;
esac

runs=${1:-3}
rates=${2:-"none 10gbit 1gbit 100mbit"}
parts=${3:-"ddp allreduce modes gpt"}
[ -x "$rill" ] && [ -x "$netbed" ] || { echo "build first: ./dev build" >&2; exit 1; }
echo "runs: $runs per rate; MLP 784-512-512-10, global batch 512, 2 nodes x 1 thread; torch BLAS: $openblas_dir"
if [[ " $parts " == *" ddp "* ]]; then
  for rate in $rates; do
    limit=()
    [ "$rate" = none ] || limit=(--rate "$rate")
    # Compressed gradients too where the link is the bound.
    compress=0
    [[ "$rate" == *mbit || "$rate" == 1gbit ]] && compress=1
    out=$("$netbed" --nodes 2 "${limit[@]}" -- bash "$0" --inside "$runs" "$(steps_at "$rate")" $compress)
    echo "== link: $rate ($(steps_at "$rate") steps a run)"
    rows() { awk -v k="$1" '$1 == k {print $2}' <<< "$out" | xargs; }
    /usr/bin/python3 bench/summarize.py "rill" "$(rows rill_none)" "torch ddp" "$(rows torch_none)"
    echo "rill: all-reduce hidden behind the backward (one traced run, bench/trace_overlap.py): $(rows hidden)"
    if [ $compress = 1 ]; then
      echo "-- 16-bit gradients (Rill: bf16 with error feedback; PyTorch: fp16_compress_hook)"
      /usr/bin/python3 bench/summarize.py "rill bf16" "$(rows rill_bf16)" "torch fp16" "$(rows torch_bf16)"
      /usr/bin/python3 bench/summarize.py "rill bf16" "$(rows rill_bf16)" "torch ddp" "$(rows torch_none)"
      echo "-- Rill's PowerSGD (rank 8, error feedback) against plain DDP"
      /usr/bin/python3 bench/summarize.py "rill powersgd" "$(rows rill_powersgd)" "torch ddp" "$(rows torch_none)"
    fi
  done
fi
if [[ " $parts " == *" allreduce "* ]]; then
  for rate in $rates; do
    echo "== all-reduce, 2 nodes, link: $rate"
    allreduce_at "$rate"
  done
fi
if [[ " $parts " == *" modes "* ]]; then
  declare -A base
  for rate in $rates; do
    [ "$rate" = 10gbit ] && continue
    limit=()
    [ "$rate" = none ] || limit=(--rate "$rate")
    steps=$(steps_at "$rate")
    for mode in pipeline pserver; do
      if [ $mode = pipeline ]; then
        out=$("$netbed" --nodes 2 "${limit[@]}" -- bash "$0" --jobs-inside "$runs" samples/mlp/mlp_stages.json \
          --steps "$steps" --set train.micro_batches=4)
      else
        out=$("$netbed" --nodes 4 "${limit[@]}" -- bash "$0" --jobs-inside "$runs" bench/mlp_synthetic.json \
          --steps "$steps" --set train.batch_size=512 --set distributed.mode=pserver --set distributed.pservers=0,1)
      fi
      rates_now=$(awk '$1 == "rate" {print $2}' <<< "$out" | xargs)
      [ "$rate" = none ] && base[$mode]=$rates_now
      echo "== $mode, link: $rate ($steps steps a run)"
      /usr/bin/python3 bench/summarize.py "$mode" "$rates_now" "unshaped" "${base[$mode]:-$rates_now}"
    done
  done
fi
if [[ " $parts " == *" gpt "* ]]; then
  for rate in $rates; do
    limit=()
    [ "$rate" = none ] || limit=(--rate "$rate")
    out=$("$netbed" --nodes 2 "${limit[@]}" -- bash "$0" --gpt-inside "$runs" 30)
    echo "== GPT sample, data parallelism on 2 nodes, link: $rate (30 steps a run)"
    /usr/bin/python3 bench/summarize.py "rill gpt" "$(awk '$1 == "rill" {print $2}' <<< "$out" | xargs)" \
      "torch ddp gpt" "$(awk '$1 == "torch" {print $2}' <<< "$out" | xargs)"
  done
fi
if [[ " $parts " == *" buckets "* ]]; then
  # Gradient buckets smaller than the model's 2.7 MB let the all-reduce
  # start during the backward: each size against the default (25 MiB after
  # a first bucket of 1 MiB), and the size the master picks from the
  # measured link (train.buckets_by_link; its steady rate is the run's after
  # the switch), at each rate.
  for rate in $rates; do
    limit=()
    [ "$rate" = none ] || limit=(--rate "$rate")
    steps=$(steps_at "$rate")
    echo "== buckets, data parallelism on 2 nodes, link: $rate ($steps steps a run)"
    declare -A by_size=()
    for size in 26214400 1048576 262144 link; do
      setting=(--set train.bucket_bytes=$size)
      [ "$size" = link ] && setting=(--set train.buckets_by_link=true)
      out=$("$netbed" --nodes 2 "${limit[@]}" -- bash "$0" --jobs-inside "$runs" bench/mlp_synthetic.json \
        --steps "$steps" --set train.batch_size=512 "${setting[@]}")
      by_size[$size]=$(awk '$1 == "rate" {print $2}' <<< "$out" | xargs)
      [ "$size" = link ] && awk '$1 == "buckets" {print "  by the link:", $2, "from step", $3}' <<< "$out"
    done
    for size in 1048576 262144 link; do
      /usr/bin/python3 bench/summarize.py "bucket $size" "${by_size[$size]}" "bucket 26214400" "${by_size[26214400]}"
    done
    # The GPT sample (3.4 MB of gradients, a longer backward): sized by the
    # link against the default.
    echo "== buckets, the GPT sample on 2 nodes, link: $rate (40 steps a run)"
    declare -A gpt=()
    for size in 26214400 link; do
      setting=(--set train.bucket_bytes=$size)
      [ "$size" = link ] && setting=(--set train.buckets_by_link=true)
      out=$("$netbed" --nodes 2 "${limit[@]}" -- bash "$0" --jobs-inside "$runs" samples/gpt/gpt_moby.json \
        --steps 40 "${setting[@]}")
      gpt[$size]=$(awk '$1 == "rate" {print $2}' <<< "$out" | xargs)
      [ "$size" = link ] && awk '$1 == "buckets" {print "  by the link:", $2, "from step", $3}' <<< "$out"
    done
    /usr/bin/python3 bench/summarize.py "gpt bucket link" "${gpt[link]}" "gpt bucket 26214400" "${gpt[26214400]}"
  done
fi
