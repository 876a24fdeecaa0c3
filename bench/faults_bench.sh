#!/usr/bin/env bash
# Training through failures: the MLP on 3 agents, one killed every PERIOD
# seconds for about DURATION seconds of training and started again, going
# on from memory (--min-nodes 2) beside restarting from the newest
# checkpoint, against a run with no failures (bench/faults_bench.py says
# what each column is).
# With layout "zero", Adam's state is sharded (train.zero) and the live run
# goes on from the replicas the nodes copy every REPLICA steps.
#   bench/faults_bench.sh [period_s=20] [duration_s=180] [checkpoint_every=100] [layout=dp|zero] [replica=10]
set -euo pipefail
cd "$(dirname "$0")/.."
rill=build/rill
[ -x "$rill" ] || { echo "build first: ./dev build" >&2; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
exec /usr/bin/python3 bench/faults_bench.py "$rill" "${1:-20}" "${2:-180}" "${3:-100}" 19868 "${4:-dp}" "${5:-10}"
