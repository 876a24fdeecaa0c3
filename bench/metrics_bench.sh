#!/usr/bin/env bash
# What watching a run costs: the synthetic MLP (bench/mlp_synthetic.json,
# batch 512) on 2 local agents, alternating runs without and with a poller
# that reads /metrics, /api/status and /api/jobs/1 from the master (as the
# dashboard page does) every second, and every 0.1 s, and with the page
# itself open in headless Chromium (which polls every second, draws, and
# shares this machine's cores with the job). Prints samples/s (median, min,
# max) and the ratios of medians.
#   [STEPS=1200] bench/metrics_bench.sh [runs=5]   (a run of 1200 steps lasts about 25 s)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
rill=build/rill
[ -x "$rill" ] || { echo "build first: ./dev build" >&2; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
poller=
trap '[ -n "$poller" ] && stop "$poller"; rm -rf "$tmp"' EXIT
http=127.0.0.1:8265  # the master's default
run() {  # run INDEX: one run, its steady samples/s on stdout
  # --insecure: no cluster key, so the endpoint asks for no token (each keyed
  # run would make a key of its own); the cost measured is the watching's.
  "$rill" run bench/mlp_synthetic.json --nodes 2 --apart --devices cpu:1 --ctrl-port $((19800 + 2 * $1)) --insecure \
    --set train.batch_size=512 --set train.steps=${STEPS:-1200} --result "$tmp/r.json" --logdir "$tmp" > /dev/null
  /usr/bin/python3 -c "import json;print(json.load(open('$tmp/r.json'))['steady_samples_per_sec'])"
}
poll() {  # poll PERIOD: reads the endpoints every PERIOD seconds until killed
  while true; do
    curl -s "http://$http/metrics" "http://$http/api/status" "http://$http/api/jobs/1" > /dev/null || true
    sleep "$1"
  done
}
browse() {  # starts the page in headless Chromium; its pid on stdout
  # Chromium starts (seconds of both cores) before the run on a page that
  # moves to the dashboard once the master serves it, so what is measured is
  # the page polling and drawing, not the browser starting.
  cat > "$tmp/wait.html" <<HTML
<script>
(function go() {
  fetch("http://$http/api/status", {mode: "no-cors"})
    .then(() => { location.href = "http://$http/"; }, () => setTimeout(go, 50));
})();
</script>
HTML
  setsid chromium --headless=new --no-sandbox --disable-gpu --user-data-dir="$tmp/chromium" \
    "file://$tmp/wait.html" > /dev/null 2>&1 &
  echo $!
}
stop() { kill -- "-$1" 2>/dev/null || kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
plain=() every_second=() every_tenth=() browsed=()
for ((r = 0; r < runs; r++)); do
  plain+=("$(run $((4 * r)))")
  poll 1 & poller=$!
  every_second+=("$(run $((4 * r + 1)))")
  stop "$poller"
  poll 0.1 & poller=$!
  every_tenth+=("$(run $((4 * r + 2)))")
  stop "$poller"
  poller=$(browse); sleep 5
  browsed+=("$(run $((4 * r + 3)))")
  stop "$poller"
  poller=
done
/usr/bin/python3 bench/summarize.py "polled every 1 s" "${every_second[*]}" "not polled" "${plain[*]}"
/usr/bin/python3 bench/summarize.py "polled every 0.1 s" "${every_tenth[*]}" "not polled" "${plain[*]}"
/usr/bin/python3 bench/summarize.py "page open in chromium" "${browsed[*]}" "not polled" "${plain[*]}"
