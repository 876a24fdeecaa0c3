#!/usr/bin/env bash
# The bf16 step's kernels by time, on a machine with a GPU and nsys (PATH or
# /usr/local/cuda/bin): GPT-2 124M (bench/gpt2_124m.json with its attention
# fused, random tokens: bench/gpt2_jobs.sh) in bf16 on cuda:1 for 12 steps
# under `nsys profile -t cuda`, then the 15 kernels that took longest, with
# their share of the kernel time. The report is OUT/bf16.nsys-rep.
#   bench/gpu_profile.sh [OUT=/tmp/rill-profile] [RUN]
# RUN prefixes every program, as in bench/gpu_all_check.sh (for a build made
# elsewhere, a wrapper such as `bash .gpu/run`, as its head says). Each step runs under its own timeout (budgets: gpu 10,
# gpt2 job 5, profile 240, stats 90, table 10; 355 s in all); the script
# ends with the summary and exits 1 naming the failed steps when any failed
# (nsys missing: the step "nsys", rc 127). Python is python3 (PYTHON).
set -u
cd "$(dirname "$0")/.." || exit
out=${1:-/tmp/rill-profile}
run=${2:-}
python=${PYTHON:-python3}
# shellcheck source=bench/gpu_suites.sh
. bench/gpu_suites.sh
rm -f "$out"/bf16.* "$out/kernels.csv"
gpu_info
# shellcheck disable=SC2016  # expanded by the inner bash
timed "gpt2 job" 5 "$out/gpt2_job.txt" env python="$python" bash -c \
  '. bench/gpt2_jobs.sh && gpt2_tokens "$1" && gpt2_fused_job bench/gpt2_124m.json "$2"' _ "$out/tokens.bin" "$out/fused.json"
nsys=$(command -v nsys || echo /usr/local/cuda/bin/nsys)
[ -x "$nsys" ]
rc=$?
[ "$rc" = 0 ] || rc=127
step nsys "$rc"
echo "$nsys"
# $rill is a command prefix, split into words on purpose.
# shellcheck disable=SC2086
timed profile 240 "$out/nsys.txt" "$nsys" profile -o "$out/bf16" --force-overwrite true -t cuda \
  $rill run "$out/fused.json" --devices cuda:1 --steps 12 --set "datasets.train.path=$out/tokens.bin" \
  --set train.precision=bf16
tail -5 "$out/nsys.txt"
timed stats 90 "$out/kernels.csv" "$nsys" stats -r cuda_gpu_kern_sum -f csv "$out/bf16.nsys-rep"
table='
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 8]
at = [i for i, r in enumerate(rows) if "Total Time (ns)" in r and "Name" in r]
if not at:
    sys.exit("no table of kernels in " + sys.argv[1])
head, body = rows[at[0]], rows[at[0] + 1:]
t, name = head.index("Total Time (ns)"), head.index("Name")
total = sum(float(r[t]) for r in body)
if not body or total <= 0:
    sys.exit("no kernel time in " + sys.argv[1])
print(f"kernel time, 12 steps: {total / 1e6:.1f} ms; the largest:")
for r in sorted(body, key=lambda r: -float(r[t]))[:15]:
    print(f"  {float(r[t]) / 1e6:8.1f} ms {100 * float(r[t]) / total:5.1f}%  {r[name][:100]}")
'
timed table 10 "$out/kernels.txt" "$python" -c "$table" "$out/kernels.csv"
cat "$out/kernels.txt"
finish
