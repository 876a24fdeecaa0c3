# What the GPU check scripts share (sourced by bench/gpu_all_check.sh,
# bench/gpu_check.sh and bench/gpu_profile.sh from the repository's root,
# with $out, the results folder, and $run, the prefix of every program, set):
#   $rill                  the rill command ("$run rill" where RUN is set)
#   timed NAME BUDGET LOG CMD...
#                          CMD under `timeout BUDGET` (seconds), its output
#                          into LOG, stdin from /dev/null; a step
#   step NAME RC [BUDGET START]
#                          a line of the summary (rc, seconds, budget,
#                          seconds so far); RC != 0 marks NAME failed
#   gpu_info               nvidia-smi's name, driver and memory: a step (10 s)
#   gpu_suites             the CUDA kernel, runtime and NCCL suites, a step
#                          each (40, 105 and 40 s), and their failures shown
#   gpu_wide               the wide MLP once (a step; 15 s), and its rate,
#                          peak memory and device synchronizes (a step:
#                          all three in its result)
#   finish                 the summary, the failed steps named; returns 1
#                          when any failed (each script ends with it)
# A step's rc: 0 passed; 77 the suite skipped itself (no GPU seen); 124 or
# 137 stopped at its budget; 126 or 127 a program missing or not runnable.
# With RUN empty (a build on this machine) the suites get RILL_SOURCE_ROOT
# and RILL_BINARY as meson's test setup gives them; .gpu/run sets both.
# shellcheck shell=bash
# $run is a command prefix, split into words on purpose; $out and $run are
# set, and $rill is used, by the script sourcing this file:
# shellcheck disable=SC2086,SC2154,SC2034
mkdir -p "$out"
: > "$out/summary.txt"
rill=build/rill
if [ -n "$run" ]; then
  rill="$run rill"
else
  export RILL_SOURCE_ROOT=${RILL_SOURCE_ROOT:-$PWD} RILL_BINARY=${RILL_BINARY:-$PWD/build/rill}
fi
t0=$(date +%s)
failed=()
budgeted=0

step() {
  local name=$1 rc=$2 budget=${3:--} start=${4:-} now note=""
  now=$(date +%s)
  [ -n "$start" ] || start=$now
  [ "$budget" = - ] || budget=${budget}s
  case $rc in
    0) ;;
    77) note="  (skipped: no GPU seen)" ;;
    124 | 137) note="  (stopped at its budget)" ;;
    126 | 127) note="  (program missing or not runnable)" ;;
  esac
  [ "$rc" = 0 ] || failed+=("$name")
  printf '%-42s rc=%-3s %4ss of %5s  %4ss in all%s\n' "$name" "$rc" $((now - start)) "$budget" $((now - t0)) "$note" |
    tee -a "$out/summary.txt"
}

timed() {
  local name=$1 budget=$2 log=$3 start rc
  shift 3
  echo "== $name (budget ${budget}s)"
  budgeted=$((budgeted + budget))
  start=$(date +%s)
  timeout -k 5 "$budget" "$@" < /dev/null > "$log" 2>&1
  rc=$?
  step "$name" "$rc" "$budget" "$start"
}

gpu_info() {
  timed gpu 10 "$out/gpu.txt" nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  cat "$out/gpu.txt"
}

gpu_suites() {
  timed kernels 40 "$out/cuda_kernels.txt" $run build/tests/kernels/cuda_kernels_test
  grep -B3 -A10 "ERROR" "$out/cuda_kernels.txt" | head -60
  tail -3 "$out/cuda_kernels.txt"
  timed runtime 105 "$out/cuda_runtime.txt" $run build/tests/runtime/cuda_runtime_test
  grep -B3 -A12 "ERROR" "$out/cuda_runtime.txt" | head -60
  grep "MESSAGE" "$out/cuda_runtime.txt" | head -10
  tail -4 "$out/cuda_runtime.txt"
  timed nccl 40 "$out/cuda_nccl.txt" $run build/tests/runtime/cuda_nccl_test
  grep -B3 -A12 "ERROR" "$out/cuda_nccl.txt" | head -40
  tail -3 "$out/cuda_nccl.txt"
}

gpu_wide() {
  rm -f "$out/wide.json"
  timed wide 15 "$out/wide.txt" $rill run bench/mlp_wide_synthetic.json --devices cuda:1 --result "$out/wide.json"
  local fields
  fields=$(grep -o '"steady_samples_per_sec": [0-9.e+-]*\|"peak_device_bytes": [0-9]*\|"device_synchronizes": [0-9]*' \
    "$out/wide.json" 2>/dev/null)
  echo "$fields"
  tail -2 "$out/wide.txt"
  [ "$(echo "$fields" | grep -c .)" = 3 ]
  step "wide: result figures" $?
}

finish() {
  echo "== summary: $(($(date +%s) - t0))s in all, budgets ${budgeted}s in all ($out)"
  cat "$out/summary.txt"
  if [ "${#failed[@]}" -gt 0 ]; then
    local list
    list=$(printf ', %s' "${failed[@]}")
    echo "FAILED: ${#failed[@]} of $(wc -l < "$out/summary.txt") steps: ${list:2}"
    return 1
  fi
  echo "PASSED: all $(wc -l < "$out/summary.txt") steps"
}
