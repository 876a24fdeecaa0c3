#!/usr/bin/env bash
# Clang's thread-safety analysis over every file that uses the annotations
# (base/thread_annotations.h, directly or through a header): each is
# compiled with clang++ -fsyntax-only -Wthread-safety as an error, with the
# flags the build gave it. First a file with a lock missing on purpose must
# fail, so the check cannot pass by checking nothing.
#   tests/lint/thread_safety.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: thread_safety.sh BUILD_DIR}" && pwd)
source_root=$(cd "$(dirname "$0")/../.." && pwd)
clang=${CLANG:-clang++}
if ! command -v "$clang" > /dev/null; then
  echo "thread_safety: $clang not found (./dev installs Debian's clang)" >&2
  exit 1
fi
flags=(-fsyntax-only -Wno-everything -Wthread-safety -Werror=thread-safety)

# The control: an unlocked read of a guarded member.
control=$(mktemp --suffix=.cc)
trap 'rm -f "$control"' EXIT
cat > "$control" <<'CC'
#include "base/mutex.h"
struct Counter {
  rill::Mutex mu;
  int n GUARDED_BY(mu) = 0;
  int read() { return n; }
};
int main() { return Counter().read(); }
CC
if "$clang" -std=c++20 -I"$source_root" "${flags[@]}" "$control" 2> /dev/null; then
  echo "thread_safety: clang accepted an unlocked read of a guarded member: the analysis is off" >&2
  exit 1
fi

# Every object whose dependencies include the annotations, and its command.
mapfile -t commands < <(cd "$build" && ninja -t deps | python3 -c '
import json, shlex, sys
uses, target = set(), None
for line in sys.stdin:
    if line and not line[0].isspace():
        target = line.split(":")[0]
    elif "base/thread_annotations.h" in line:
        uses.add(target)
for entry in json.load(open("compile_commands.json")):
    out = entry.get("output")
    if out is None:
        args = shlex.split(entry["command"])
        out = args[args.index("-o") + 1] if "-o" in args else None
    if out in uses and entry["file"].endswith(".cc"):
        args = shlex.split(entry["command"])
        while args and not args[0].startswith("-"):
            args.pop(0)
        keep, skip = [], False
        for a in args:
            if skip:
                skip = False
                continue
            if a in ("-MQ", "-MF", "-o"):
                skip = True
                continue
            if a in ("-MD", "-c", "-fdiagnostics-color=always") or a == entry["file"]:
                continue
            keep.append(a)
        print(shlex.join(keep + [entry["file"]]))
')
if [ ${#commands[@]} -eq 0 ]; then
  echo "thread_safety: no object of $build uses base/thread_annotations.h (is it built?)" >&2
  exit 1
fi
echo "thread_safety: ${#commands[@]} file(s)"
cd "$build"
printf '%s\n' "${commands[@]}" |
  xargs -P "$(nproc)" -I{} sh -c "$clang ${flags[*]} {}" || {
    echo "thread_safety: a lock the annotations call for is not held (above)" >&2
    exit 1
  }
echo "thread_safety: no finding"
