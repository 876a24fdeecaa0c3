# What the GPU check scripts share (sourced by bench/gpu_check.sh and
# bench/gpu_amp_check.sh, with $out, the results folder, and $run, the
# prefix of every program, set): $rill, step NAME RC (a line of the
# summary with the seconds so far), and gpu_suites, which runs the CUDA
# kernel, runtime and NCCL suites and shows their failures.
mkdir -p "$out"
rill=build/rill
[ -n "$run" ] && rill="$run rill"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
t0=$(date +%s)
step() { echo "$1 rc=$2 $(( $(date +%s) - t0 ))s" | tee -a "$out/summary.txt"; }
gpu_suites() {
  $run build/tests/kernels/cuda_kernels_test > "$out/cuda_kernels.txt" 2>&1; step kernels $?
  grep -B3 -A10 "ERROR" "$out/cuda_kernels.txt" | head -60
  tail -3 "$out/cuda_kernels.txt"
  $run build/tests/runtime/cuda_runtime_test > "$out/cuda_runtime.txt" 2>&1; step runtime $?
  grep -B3 -A12 "ERROR" "$out/cuda_runtime.txt" | head -60
  grep "MESSAGE" "$out/cuda_runtime.txt" | head -10
  tail -4 "$out/cuda_runtime.txt"
  $run build/tests/runtime/cuda_nccl_test > "$out/cuda_nccl.txt" 2>&1; step nccl $?
  grep -B3 -A12 "ERROR" "$out/cuda_nccl.txt" | head -40
  tail -3 "$out/cuda_nccl.txt"
}
