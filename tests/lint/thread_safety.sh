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
listed=$(mktemp)
trap 'rm -f "$control" "$listed"' EXIT
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

# Every object whose dependencies include the annotations, its command, and
# a key of what clang would read: its version, the flags, the command and
# the contents of every file the object's dependencies name (ninja -t deps).
# A file whose key passed before is not analysed again (a cache in
# ${XDG_CACHE_HOME:-~/.cache}/rill-thread-safety, or RILL_THREAD_SAFETY_CACHE,
# as ccache keeps objects).
cache=${RILL_THREAD_SAFETY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rill-thread-safety}
mkdir -p "$cache"
version=$("$clang" --version | head -1)
if ! (cd "$build" && ninja -t deps | VERSION="$version ${flags[*]}" python3 -c '
import hashlib, json, os, shlex, sys
deps, target = {}, None
for line in sys.stdin:
    if line and not line[0].isspace():
        target = line.split(":")[0]
        deps[target] = []
    elif line.strip():
        deps[target].append(line.strip())
uses = {t for t, files in deps.items() if any(f.endswith("base/thread_annotations.h") for f in files)}
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
        command = shlex.join(keep + [entry["file"]])
        key = hashlib.sha256((os.environ["VERSION"] + "\n" + command).encode())
        for f in sorted(set(deps[out] + [entry["file"]])):
            key.update(f.encode())
            with open(f, "rb") as data:
                key.update(hashlib.sha256(data.read()).digest())
        print(key.hexdigest() + " " + command)
' > "$listed"); then
  echo "thread_safety: could not list the files and their inputs from $build (above)" >&2
  exit 1
fi
mapfile -t commands < "$listed"
if [ ${#commands[@]} -eq 0 ]; then
  echo "thread_safety: no object of $build uses base/thread_annotations.h (is it built?)" >&2
  exit 1
fi
todo=()
for line in "${commands[@]}"; do
  [ -e "$cache/${line%% *}" ] || todo+=("$line")
done
echo "thread_safety: ${#commands[@]} file(s), $((${#commands[@]} - ${#todo[@]})) passed before with the same inputs"
cd "$build"
# Each file that passes leaves its key in the cache.
if [ ${#todo[@]} -gt 0 ]; then
  printf '%s\n' "${todo[@]}" |
    xargs -d '\n' -P "$(nproc)" -I{} sh -c 'eval "$0 ${1#* }" && touch "$2/${1%% *}"' "$clang ${flags[*]}" {} "$cache" || {
      echo "thread_safety: a lock the annotations call for is not held (above)" >&2
      exit 1
    }
fi
echo "thread_safety: no finding"
