#!/usr/bin/env bash
# Rill's collectives against OpenMPI's, RANKS ranks (default 2) on this
# machine, for each collective in OPS (default all_reduce all_gather
# reduce_scatter broadcast all_to_all). Rill's ranks of one machine talk
# through its shared memory (ZeroMQ over TCP between machines); MPI's:
#   MPI tcp   --mca btl self,tcp on loopback: the like-for-like comparison
#   MPI vader --mca btl self,vader (shared memory): MPI without a network, for reference
# Both programs time each call as its slowest rank's and print the median; this
# script runs ROUNDS rounds (default 3) in turn, takes each table's median bus
# bandwidth per size over the rounds, and prints Rill's ratio to each.
#
#   bench/allreduce_vs_mpi.sh [build-dir] [allreduce_bench flags, e.g. --sizes 4096,4194304]
#   ROUNDS=5 RANKS=3 OPS=all_reduce MPI_BIND=core bench/allreduce_vs_mpi.sh build
#
# Needs OpenMPI (apt-get install -y openmpi-bin libopenmpi-dev); builds
# bench/allreduce_mpi.c with mpicc into the build folder.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
rounds=${ROUNDS:-3}
ranks=${RANKS:-2}
ops=${OPS:-all_reduce all_gather reduce_scatter broadcast all_to_all}
bind=${MPI_BIND:-none}
bench="$build/bench/allreduce_bench"
if [ ! -x "$bench" ]; then
  echo "allreduce_vs_mpi: $bench not built (ninja -C $build bench/allreduce_bench)" >&2
  exit 1
fi
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
  echo "allreduce_vs_mpi: OpenMPI not found (apt-get install -y openmpi-bin libopenmpi-dev)" >&2
  exit 1
fi
mpi_bin="$build/bench/allreduce_mpi"
mpicc -O2 -o "$mpi_bin" "$root/bench/allreduce_mpi.c"

# The same sizes and counts for both programs.
sizes=4096,1048576,67108864
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  if [ "${args[$i]}" = "--sizes" ]; then sizes=${args[$((i + 1))]}; fi
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_flags=(--allow-run-as-root -np "$ranks" --bind-to "$bind" --mca pml ob1 --oversubscribe)

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for op in $ops; do
  rm -f "$out"/*
  for ((round = 1; round <= rounds; round++)); do
    "$bench" --op "$op" --ranks "$ranks" --sizes "$sizes" "${args[@]}" > "$out/rill.$round"
    mpirun "${mpirun_flags[@]}" --mca btl self,tcp --mca btl_tcp_if_include lo "$mpi_bin" --op "$op" \
      --sizes "$sizes" > "$out/tcp.$round" 2> "$out/tcp.err" || { cat "$out/tcp.err" >&2; exit 1; }
    mpirun "${mpirun_flags[@]}" --mca btl self,vader "$mpi_bin" --op "$op" --sizes "$sizes" \
      > "$out/vader.$round" 2> "$out/vader.err" || { cat "$out/vader.err" >&2; exit 1; }
  done

  echo "== $op, $ranks ranks, round 1 (uptime: $(uptime | sed 's/.*load/load/'))"
  cat "$out/rill.1"
  echo "# MPI over --mca btl self,tcp (bind-to $bind)"
  cat "$out/tcp.1"
  echo "# MPI over --mca btl self,vader (bind-to $bind)"
  cat "$out/vader.1"
  echo
  echo "== $op, $ranks ranks: median over $rounds rounds of each run's median busbw (GB/s)"
  # Columns of the tables: bytes iters median_us p10_us p90_us algbw busbw (rill's: algorithm).
  awk -v rounds="$rounds" '
    FNR == 1 { split(FILENAME, parts, "/"); split(parts[length(parts)], name, "."); kind = name[1] }
    /^ *[0-9]/ {
      values[kind, $1] = values[kind, $1] " " $7; us[kind, $1] = us[kind, $1] " " $3; seen[$1] = 1
      if (kind == "rill") { algorithm[$1] = $8; for (k = 9; k <= NF; k++) algorithm[$1] = algorithm[$1] " " $k }
    }
    function median(list,    n, v, i, j, t) {
      n = split(list, v, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
      return v[int((n + 1) / 2)]
    }
    END {
      printf "%12s %10s %10s %10s %12s %12s %10s %10s %10s  %s\n", "bytes", "rill", "mpi_tcp", "mpi_vader", "rill/tcp",
             "rill/vader", "rill_us", "tcp_us", "vader_us", "rill_algorithm"
      n = 0
      for (b in seen) order[++n] = b + 0
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (order[j] < order[i]) { t = order[i]; order[i] = order[j]; order[j] = t }
      for (i = 1; i <= n; i++) {
        b = order[i]
        r = median(values["rill", b]); t = median(values["tcp", b]); v = median(values["vader", b])
        printf "%12d %10.3f %10.3f %10.3f %11.2fx %11.2fx %10.2f %10.2f %10.2f  %s\n", b, r, t, v, (t > 0 ? r / t : 0),
               (v > 0 ? r / v : 0), median(us["rill", b]), median(us["tcp", b]), median(us["vader", b]), algorithm[b]
      }
    }' "$out"/rill.* "$out"/tcp.* "$out"/vader.*
  echo
done
