#!/usr/bin/env bash
# A launched program's all_reduce on 2 machines of 2 ranks (the test bed:
# a network namespace per machine, veth links through a bridge, tc's tbf
# both ways), within each machine first (comm/collective_tiers.cc: each
# machine sends its tensor across once) against one ring of the 4 ranks
# (whose boundary ranks send 1.5 times it across). bench/allreduce_bench.cc
# with --machines, sealed (a cluster key), ranks of a machine through shared
# memory. At each rate the two alternate, `runs` times each, on one bed;
# prints each size's median time per call (the median over runs of each
# run's median) with the runs' spread, and the ratio ring / machines first.
#   bench/tiers_bench.sh [runs=3] [rates="none 1gbit 100mbit"] [sizes=4194304,16777216]
# Needs root (namespaces) and a build (build/tests/net/netbed, build/bench/allreduce_bench).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
rates=${2:-"none 1gbit 100mbit"}
sizes=${3:-4194304,16777216}
rill=build/rill
netbed=build/tests/net/netbed
bench=build/bench/allreduce_bench
[ -x "$rill" ] && [ -x "$netbed" ] && [ -x "$bench" ] || { echo "build first: ./dev build" >&2; exit 1; }

# Inside the bed: `runs` alternating pairs; a line "flat|tiers SIZE MEDIAN_US ALGORITHM" per size and run.
inside() {
  local runs=$1 sizes=$2 key=$3
  for _ in $(seq "$runs"); do
    for flat in 1 0; do
      # shellcheck disable=SC2086
      $NETBED_NS_0 "$bench" --ranks 4 --machines 0,0,1,1 --flat $flat --rank-prefix-env NETBED_NS_ \
        --addresses "$NETBED_ADDR_0,$NETBED_ADDR_0,$NETBED_ADDR_1,$NETBED_ADDR_1" --key "$key" --warmup 1 \
        --iters 8 --sizes "$sizes" | awk -v flat=$flat '!/^#/ { print (flat ? "ring" : "tiers"), $1, $3, $NF }'
    done
  done
}
if [ "${RILL_TIERS_INSIDE:-}" = 1 ]; then inside "$runs" "$sizes" "$RILL_TIERS_KEY"; exit; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$rill" keygen "$tmp/cluster.key" > /dev/null

echo "# all_reduce on 2 machines x 2 ranks, sealed: median us per call over $runs runs (min-max of the runs' medians)"
printf "%-8s %10s %24s %24s %7s\n" link bytes "ring (all 4 ranks)" "machines first" ratio
for rate in $rates; do
  limit=()
  [ "$rate" = none ] || limit=(--rate "$rate")
  out=$(RILL_TIERS_INSIDE=1 RILL_TIERS_KEY="$tmp/cluster.key" "$netbed" --nodes 2 "${limit[@]}" -- bash "$0" "$runs" "$rates" "$sizes")
  for size in ${sizes//,/ }; do
    echo "$out" | awk -v size="$size" -v rate="$rate" '
      function median(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                          return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
      $2 == size && $1 == "ring"  { r[++nr] = $3 }
      $2 == size && $1 == "tiers" { t[++nt] = $3; algo = $4 }
      END {
        mr = median(r, nr); mt = median(t, nt)
        printf "%-8s %10s %10.0f (%5.0f-%5.0f) %10.0f (%5.0f-%5.0f) %6.2fx\n", rate, size, mr, r[1], r[nr], mt, t[1], t[nt], mr / mt
      }'
  done
done
