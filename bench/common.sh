# Sourced by the Rill-only benchmarks: strict mode, the repository root as
# the working directory, a built rill in $rill, one BLAS thread per process,
# a scratch folder $tmp removed on exit, and steady_rate FILE (a result's
# samples/s after warm-up).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rill=build/rill
[ -x "$rill" ] || { echo "build first: ./dev build" >&2; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
steady_rate() { /usr/bin/python3 -c "import json;print(json.load(open('$1'))['steady_samples_per_sec'])"; }
