#!/usr/bin/env bash
# Runs a test in a network namespace of its own that has only loopback up
# (127.0.0.0/8 and ::1), when this user may make one (root): its agents'
# fixed ports then meet no other suite's, so ./dev test runs the suites of
# agents several at once. Where no namespace can be made the test runs in
# the machine's own network, holding a lock of this user's while it runs,
# so such tests take turns and their ports never meet.
#   tests/own_network.sh PROGRAM [ARGS...]
#   tests/own_network.sh --check     exits 0 when a namespace can be made
set -euo pipefail

can_isolate() {
  [ "${RILL_SHARED_NETWORK:-}" != 1 ] && command -v unshare > /dev/null && command -v ip > /dev/null &&
    unshare --net true 2> /dev/null
}

if [ "${1:-}" = --check ]; then
  can_isolate
  exit
fi
if [ $# -eq 0 ]; then
  echo "usage: $0 PROGRAM [ARGS...] | --check" >&2
  exit 2
fi
if can_isolate; then
  # The namespace lives as long as the test's process: nothing to remove.
  exec unshare --net -- bash -c 'ip link set lo up && exec "$@"' own_network "$@"
fi
if command -v flock > /dev/null; then
  exec flock "${TMPDIR:-/tmp}/rill-shared-network-tests-$(id -u).lock" "$@"
fi
exec "$@"
