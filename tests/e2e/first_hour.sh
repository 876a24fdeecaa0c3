#!/usr/bin/env bash
# A new user's first hour, replayed: every command of the README's tour, as
# written there, one after another in a fresh folder (build/, samples/ and
# data/ of this tree linked into it, as a clone has them), each checked to
# end well and to print what it did.
#
# What one machine needs in place of several: 10.0.0.1 and 10.0.0.2 become
# 127.0.0.1 and 127.0.0.2; an agent's line runs in the background (on its
# own machine it has a terminal of its own), and the next command waits for
# the cluster to form as a user would; a launch on node 0 gets its node 1
# beside it. GPU lines are skipped where there is no GPU. `rill check
# my_job.json` is run on a file the user has not written yet: it must say
# so, naming the file.
#
# tests/e2e/first_hour.sh [--quick]
#   --quick: training runs stop after 20 steps (40 when they resume), so the
#   whole tour takes minutes (the test suite's way); without it every command
#   runs exactly as written (about a quarter of an hour on 2 cores).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${RILL_BUILD_DIR:-$root/build}  # the tree's build folder (meson test sets it)
quick=0
[[ ${1:-} == --quick ]] && quick=1

work=$(mktemp -d "${TMPDIR:-/tmp}/rill-first-hour-XXXXXX")
background=()
cleanup() {
  for pid in "${background[@]}"; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ln -s "$build" "$work/build"
ln -s "$root/samples" "$work/samples"
[[ -d $root/data ]] && ln -s "$root/data" "$work/data"
cd "$work" || exit 1
# A config folder of this replay's own: the tour's `rill keygen --default`
# writes the user's default key there, never in the real ~/.config.
export XDG_CONFIG_HOME="$work/config"

# The tour: the README's first sh block after "## A 60-second tour", comment
# lines dropped, continued lines joined.
mapfile -t commands < <(awk '
  /^## A 60-second tour/ { tour = 1; next }
  tour && /^```sh/ { inside = 1; next }
  inside && /^```/ { exit }
  inside {
    line = $0
    if (line ~ /\\$/) { sub(/\\$/, "", line); held = held line; next }
    line = held line; held = ""
    if (line ~ /^[[:space:]]*(#|$)/) next
    print line
  }' "$root/README.md")
if (( ${#commands[@]} < 10 )); then
  echo "first hour: found ${#commands[@]} tour commands in README.md; expected the tour block" >&2
  exit 1
fi

has_gpu=0
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && has_gpu=1
failures=0
n=0
forming=0
for written in "${commands[@]}"; do
  n=$((n + 1))
  # Its comment off, as the shell would drop it anyway.
  command=$(sed -E 's/[[:space:]]+#.*$//' <<<"$written")
  command=${command//10.0.0.1/127.0.0.1}
  command=${command//10.0.0.2/127.0.0.2}
  if [[ $command == *cuda:* ]] && (( ! has_gpu )); then
    echo "[$n] skipped (no GPU here): $command"
    continue
  fi
  if (( quick )) && [[ $command =~ build/rill\ (run|submit)\  ]]; then
    # On the training command itself (the first of a && chain).
    steps=" --steps 20"
    [[ $command == *--resume* ]] && steps=" --steps 40"
    if [[ $command == *" && "* ]]; then command="${command%% && *}$steps && ${command#* && }"; else command+=$steps; fi
  fi
  log="$work/command-$n.log"
  if [[ $command == "build/rill agent "* ]]; then
    bash -c "$command" >"$log" 2>&1 &
    background+=($!)
    forming=1
    echo "[$n] started in the background: $command"
    continue
  fi
  if (( forming )); then
    # The agents just started: wait until the master says every node is up.
    forming=0
    for _ in $(seq 300); do  # 60 s at most (a master not listening yet is refused at once)
      build/rill status --master 127.0.0.1 2>/dev/null |
        awk '$1 ~ /^[0-9]+$/ { rows++; if ($4 != "up") down = 1 } END { exit !(rows > 0 && !down) }' && break
      sleep 0.2
    done
  fi
  if [[ $command == "build/rill launch "*"--node_rank 0"* ]]; then
    partner=${command/--node_rank 0/--node_rank 1}
    bash -c "$partner" >"$log.node1" 2>&1 &
    background+=($!)
  fi
  start=$(date +%s%N)
  # Each command in this shell: an export carries to the ones after it.
  eval "$command" >"$log" 2>&1
  code=$?
  seconds=$(awk -v ns=$(($(date +%s%N) - start)) 'BEGIN { printf "%.1f", ns / 1e9 }')
  ok=1
  if [[ $command == *"check my_job.json"* ]]; then
    # Not written yet: the error must name the file.
    (( code != 0 )) && grep -q "my_job.json" "$log" || ok=0
  else
    (( code == 0 )) && [[ -s $log ]] || ok=0
  fi
  if (( ok )); then
    printf '[%d] ok (%s s): %s\n      -> %s\n' "$n" "$seconds" "$command" "$(grep -av '^\s*$' "$log" | tail -1 | tr -cd '[:print:]' | cut -c1-150)"
  else
    failures=$((failures + 1))
    printf '[%d] FAILED (exit %d, %s s): %s\n' "$n" "$code" "$seconds" "$command"
    sed 's/^/      | /' "$log" | tail -25
  fi
done
echo "first hour: ${#commands[@]} commands, $failures failed"
(( failures == 0 ))
