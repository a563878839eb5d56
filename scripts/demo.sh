#!/usr/bin/env bash
# The main job, from a fresh machine: install metaledger, start a local 3-node cluster,
# write and read a key, print every node's offsets, and keep serving until Ctrl-C.
# Env: METALEDGER_DATA (default ./data/demo), METALEDGER_BASE_PORT (default 12370).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e . 2>&1 | grep -v -e '^WARNING: Location' -e 'Running pip as' || true
data=${METALEDGER_DATA:-./data/demo}
base=${METALEDGER_BASE_PORT:-12370}
endpoints="127.0.0.1:$base,127.0.0.1:$((base + 10)),127.0.0.1:$((base + 20))"
metaledger cluster up --nodes 3 --data-dir "$data" --base-port "$base" &
cluster=$!
trap 'kill -INT $cluster 2>/dev/null; wait $cluster' INT TERM
deadline=$((SECONDS + 60))
until metaledger get greeting --endpoints "$endpoints" >/dev/null 2>&1; do  # linearizable: needs a leader
  if ! kill -0 $cluster 2>/dev/null || [ $SECONDS -ge $deadline ]; then
    echo "demo: the cluster did not come up (logs in $data/n*.log)" >&2; exit 1
  fi
  sleep 0.5
done
echo "\$ metaledger put greeting 'hello from metaledger'"
metaledger put greeting "hello from metaledger" --endpoints "$endpoints"
echo "\$ metaledger get greeting"
metaledger get greeting --endpoints "$endpoints"
echo "\$ metaledger status"
metaledger status --endpoints "$endpoints"
echo "serving on $endpoints (etcdctl works too: ETCDCTL_API=3 etcdctl --endpoints=$endpoints get greeting); Ctrl-C to stop"
wait $cluster
