#!/usr/bin/env bash
# The main job, from a fresh machine: install metaledger, start a local 3-node cluster on the
# default ports (node n0's client port 127.0.0.1:9877 is the CLI's default endpoint, so no
# command needs --endpoints), write and read a key, print every node's status, and keep
# serving until Ctrl-C.
# Env: METALEDGER_DATA (default ./data/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e . 2>&1 | grep -v -e '^WARNING: Location' -e 'Running pip as' || true
data=${METALEDGER_DATA:-./data/demo}
metaledger cluster up --nodes 3 --data-dir "$data" &
cluster=$!
trap 'kill -INT $cluster 2>/dev/null; wait $cluster' EXIT  # also when a step fails
trap 'exit 130' INT TERM
deadline=$((SECONDS + 60))
until metaledger status >/dev/null 2>&1 && metaledger get greeting >/dev/null 2>&1; do  # every member up; a leader
  if ! kill -0 $cluster 2>/dev/null || [ $SECONDS -ge $deadline ]; then
    echo "demo: the cluster did not come up (logs in $data/n*.log)" >&2; exit 1
  fi
  sleep 0.5
done
echo "\$ metaledger put greeting 'hello from metaledger'"
metaledger put greeting "hello from metaledger"
echo "\$ metaledger get greeting"
metaledger get greeting
echo "\$ metaledger status"
metaledger status
echo "serving; try: metaledger status, metaledger cluster restart n1 --data-dir $data"
echo "(etcdctl works too: ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:9877 get greeting); Ctrl-C to stop"
wait $cluster
