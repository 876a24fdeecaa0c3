#!/usr/bin/env bash
# Fuzzes each parser of outside bytes with libFuzzer under ASan and UBSan
# (clang; Debian's clang package): builds build-fuzz/ with -Dfuzz=true and
# runs each target for RUNS executions from its corpus (tests/fuzz/corpus/
# TARGET: the seeds its mutation_driver writes, `--write-seeds`), keeping
# what libFuzzer finds new in a scratch folder. A finding stops the run
# and leaves the input as crash-* / leak-* / timeout-* in the working folder;
# the script then exits non-zero.
#   tests/fuzz/libfuzzer.sh [RUNS=1000000] [TARGET...]   (job_file plan control actor_wire datasets)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-1000000}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(job_file plan control actor_wire datasets)
dir=build-fuzz
if [ ! -f "$dir/build.ninja" ]; then
  CC=clang CXX=clang++ meson setup "$dir" -Dfuzz=true -Dcuda=disabled -Db_sanitize=address,undefined \
    -Db_lundef=false --buildtype=debugoptimized
fi
ninja -C "$dir" $(printf 'tests/fuzz/fuzz_%s ' "${targets[@]}")
export RILL_SOURCE_ROOT=$PWD
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
found=0
for t in "${targets[@]}"; do
  corpus=tests/fuzz/corpus/$t
  work=$(mktemp -d)
  echo "== fuzz_$t: $runs runs"
  code=0
  "$dir/tests/fuzz/fuzz_$t" -runs="$runs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    "$work" "$corpus" > "$work.log" 2>&1 || code=$?
  grep -aE "stat::number_of_executed_units|stat::peak_rss_mb|ERROR|SUMMARY|Done" "$work.log" || true
  [ "$code" -ne 0 ] && { echo "fuzz_$t: a finding (exit $code); its input is in the working folder"; found=1; }
  rm -rf "$work" "$work.log"
done
exit $found
