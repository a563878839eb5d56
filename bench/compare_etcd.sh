#!/usr/bin/env bash
# etcd 3.4 vs metaledger side by side on loopback; see `python -m bench.compare_etcd --help`.
#   bench/compare_etcd.sh [--rows put:1,put:16] [--duration 10] ...
#   COMPARE_ROWS=put:64 COMPARE_DURATION=5 bench/compare_etcd.sh
# The Python driver starts and stops both clusters by PID and bounds the total time; this
# wrapper only makes sure the driver itself is stopped (and so cleans up) on Ctrl-C/TERM/exit.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

"$PYTHON" -m bench.compare_etcd "$@" &
driver=$!

stop_driver() {
  trap - INT TERM EXIT
  if kill -0 "$driver" 2>/dev/null; then
    kill -TERM "$driver" 2>/dev/null || true
    wait "$driver" 2>/dev/null || true
  fi
}
trap 'stop_driver; exit 130' INT TERM
trap stop_driver EXIT

set +e
wait "$driver"
rc=$?
set -e
trap - EXIT
exit "$rc"
