#!/usr/bin/env bash
# How the control plane grows with the cluster. N keyed agents, each on a
# loopback address of its own (127.0.1.1, 127.0.1.2, ...: every pair talks
# TCP, as between machines; no shared memory between different addresses),
# form a cluster, train a linear regression to w = [2, 3] across all of
# them (global batch 256 of 1,024 rows, 100 steps, one cpu device each), and
# shut down. For each N:
#   form_s      from starting the agents to every node up in `rill status`
#   first_s     from the master taking the job to its first step's metrics
#               (the result's seconds_to_first_step: every node's compile,
#               the data checks, the start)
#   job_s       the whole `rill submit`, as its client sees it
#   down_s      from `rill shutdown` to every agent gone
#   idle, while no job runs, over idle_seconds:
#     master_cpu   the master's CPU seconds per second
#     master_rss   the master's resident memory, MiB
#     ctl_bytes    bytes per second on the master's control port, both ways
#                  (heartbeats, their replies; `ss`'s counts of each
#                  connection)
#     agent_cpu    the other agents' CPU seconds per second, each
#     agent_rss    the other agents' resident memory, MiB each
#     lo_bytes     bytes per second over loopback, all agents together (the
#                  control plane, and the data plane's ZMTP pings on each of
#                  the N(N-1) connections)
# and each per agent (divided by N) where it should stay flat.
#   bench/scale_bench.sh [sizes="8 16 32 64"] [idle_seconds=10]
# Every agent is killed on exit, also on failure.
source "$(dirname "$0")/common.sh"
sizes=${1:-"8 16 32 64"}
idle=${2:-10}
port=19400
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

/usr/bin/python3 - "$tmp/lr.json" << 'EOF'
import json, sys
rows = 1024
x = [[((i * 37) % 101) / 50.0 - 1.0, ((i * 53) % 97) / 48.0 - 1.0] for i in range(rows)]
y = [[2 * a + 3 * b] for a, b in x]
job = {
  "name": "linear_regression_scale",
  "datasets": [{"name": "data", "kind": "inline", "tensors": [
    {"name": "x", "shape": [rows, 2], "data": [v for r in x for v in r]},
    {"name": "y", "shape": [rows, 1], "data": [v for r in y for v in r]}]}],
  "inputs": [{"name": "x", "dataset": "data", "field": "x", "shape": [2]},
             {"name": "y", "dataset": "data", "field": "y", "shape": [1]}],
  "variables": [{"name": "w", "shape": [2, 1], "init": {"type": "fill", "value": 0}}],
  "ops": [{"name": "y_pred", "type": "matmul", "inputs": ["x", "w"]},
          {"name": "loss", "type": "mse_loss", "inputs": ["y_pred", "y"], "attrs": {"reduction": "mean"}}],
  "loss": "loss",
  "optimizer": {"type": "sgd", "lr": 0.5},
  "train": {"steps": 100, "batch_size": 256, "shuffle": False, "log_every": 50}}
json.dump(job, open(sys.argv[1], "w"))
EOF

ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
others_ticks() {
  local t=0
  for p in "${pids[@]:1}"; do t=$((t + $(cpu_ticks "$p"))); done
  echo $t
}
ctl_bytes() {
  ss -tinH state established "( src $master )" | grep -o 'bytes_\(acked\|received\):[0-9]*' |
    awk -F: '{s += $2} END {printf "%.0f\n", s}'
}
lo_bytes() { awk '$1 == "lo:" {printf "%.0f\n", $2 + $10}' /proc/net/dev; }
now() { date +%s.%N; }

printf "%-5s %-7s %-8s %-8s %-7s %-11s %-11s %-11s %-13s %-10s %-10s %-12s %s\n" N form_s first_s job_s down_s \
  master_cpu cpu/agent master_MiB ctl_B/s/agent agent_cpu agent_MiB lo_B/s/agent "w"
for n in $sizes; do
  machines=$(for ((r = 0; r < n; ++r)); do printf "127.0.1.%d:%d," $((r + 1)) $port; done)
  machines=${machines%,}
  rm -f "$tmp/cluster.key"
  "$rill" keygen "$tmp/cluster.key" > /dev/null
  key=(--key "$tmp/cluster.key")
  master=127.0.1.1:$port
  pids=()
  t0=$(now)
  for ((r = 0; r < n; ++r)); do
    "$rill" agent --machines "$machines" --rank $r "${key[@]}" --devices cpu:1 --join-timeout 600 --http off \
      --dead-after 30 > "$tmp/agent$r.log" 2>&1 &
    pids+=($!)
  done
  formed=
  for ((i = 0; i < 3000; ++i)); do  # 10 minutes at most
    status=$("$rill" status --master "$master" "${key[@]}" 2> /dev/null || true)
    if grep -q "up (master)" <<< "$status" && ! grep -Eq "joining|not joined" <<< "$status"; then
      formed=$(now)
      break
    fi
    sleep 0.2
  done
  if [ -z "$formed" ]; then
    echo "$n agents did not form a cluster:" >&2
    tail -n 5 "$tmp"/agent0.log >&2
    exit 1
  fi

  # Idle: heartbeats and pings only.
  m=${pids[0]}
  c0=$(cpu_ticks "$m"); o0=$(others_ticks); io0=$(ctl_bytes); lo0=$(lo_bytes); i0=$(now)
  sleep "$idle"
  c1=$(cpu_ticks "$m"); o1=$(others_ticks); io1=$(ctl_bytes); lo1=$(lo_bytes); i1=$(now)
  master_rss=$(rss_kib "$m")
  others=0
  for p in "${pids[@]:1}"; do others=$((others + $(rss_kib "$p"))); done

  s0=$(now)
  "$rill" submit "$tmp/lr.json" --master "$master" "${key[@]}" --result "$tmp/result$n.json" > "$tmp/submit$n.log" 2>&1 || {
    echo "the job on $n agents failed:" >&2
    cat "$tmp/submit$n.log" >&2
    exit 1
  }
  s1=$(now)
  "$rill" shutdown --master "$master" "${key[@]}" > /dev/null
  d0=$(now)
  for p in "${pids[@]}"; do
    for ((i = 0; i < 600 && $(kill -0 "$p" 2> /dev/null && echo 1 || echo 0) == 1; ++i)); do sleep 0.1; done
  done
  d1=$(now)
  /usr/bin/python3 - "$tmp/result$n.json" "$n" "$t0" "$formed" "$s0" "$s1" "$d0" "$d1" "$i0" "$i1" "$c0" "$c1" "$ticks" \
    "$io0" "$io1" "$lo0" "$lo1" "$master_rss" "$others" "$o0" "$o1" << 'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
t0, formed, s0, s1, d0, d1, i0, i1, c0, c1, ticks, io0, io1, lo0, lo1, rss, others, o0, o1 = map(float, sys.argv[3:])
secs = i1 - i0
cpu = (c1 - c0) / ticks / secs
w = r["variables"]["w"]["values"]
agent_cpu = (o1 - o0) / ticks / secs / max(1, n - 1)
print(f"{n:<5} {formed - t0:<7.2f} {r.get('seconds_to_first_step', 0):<8.2f} {s1 - s0:<8.2f} {d1 - d0:<7.2f} "
      f"{cpu:<11.4f} {cpu / n:<11.5f} {rss / 1024:<11.1f} {(io1 - io0) / secs / n:<13.0f} "
      f"{agent_cpu:<10.4f} {others / 1024 / max(1, n - 1):<10.1f} {(lo1 - lo0) / secs / n:<12.0f} [{w[0]:.4f}, {w[1]:.4f}]")
EOF
  pids=()
done
