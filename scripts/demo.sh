#!/usr/bin/env bash
# The main job, from a fresh machine: install metaledger, start a local 3-node cluster on the
# default ports (node n0's client port 127.0.0.1:9877 is the CLI's default endpoint, so no
# command needs --endpoints) with a 3-replica quorum-write broker group beside it, write and
# read a key, send and consume a message with a real RocketMQ client (the `rocketmq` wheel),
# print every node's status, and keep serving until Ctrl-C.
# Env: METALEDGER_DATA (default ./data/demo), METALEDGER_BASE_PORT (default 9877: cluster up's
# port layout; the README's examples assume it), METALEDGER_SKIP_INSTALL=1 (no pip install: the
# README test runs this script against the tree it tests).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${METALEDGER_SKIP_INSTALL:-0}" != 1 ]; then
  python3 -m pip install -q --disable-pip-version-check -e '.[clients]' 2>&1 | grep -v -e '^WARNING: Location' -e 'Running pip as' || true
fi
data=${METALEDGER_DATA:-./data/demo}
base=${METALEDGER_BASE_PORT:-9877}
export METALEDGER_ENDPOINTS=${METALEDGER_ENDPOINTS:-127.0.0.1:$base}
metaledger cluster up --nodes 3 --brokers 3 --data-dir "$data" --base-port "$base" &
cluster=$!
trap 'kill -INT $cluster 2>/dev/null; wait $cluster' EXIT  # also when a step fails
trap 'exit 130' INT TERM
deadline=$((SECONDS + 60))
in_sync() {  # every replica of broker-a alive and in its in-sync set
  metaledger replica-group show broker-a -w json 2>/dev/null | python3 -c \
    'import json,sys; g=json.load(sys.stdin); sys.exit(not (len(g["replicas"]) == 3 and all(r["alive"] and r["in_sync"] for r in g["replicas"])))'
}
until metaledger status >/dev/null 2>&1 && metaledger get greeting >/dev/null 2>&1 && in_sync; do
  if ! kill -0 $cluster 2>/dev/null || [ $SECONDS -ge $deadline ]; then
    echo "demo: the cluster did not come up (logs in $data/n*.log, $data/broker-a-*.log)" >&2; exit 1
  fi
  sleep 0.5
done
echo "\$ metaledger put greeting 'hello from metaledger'"
metaledger put greeting "hello from metaledger"
echo "\$ metaledger get greeting"
metaledger get greeting
echo "\$ metaledger replica-group show broker-a"
metaledger replica-group show broker-a
echo "\$ metaledger route topic create Hello --broker broker-a"
metaledger route topic create Hello --broker broker-a
echo "\$ python3 scripts/rocketmq_hello.py 127.0.0.1:$((base + 2)) Hello   # a real RocketMQ client"
python3 scripts/rocketmq_hello.py "127.0.0.1:$((base + 2))" Hello
echo "\$ metaledger status"
metaledger status
echo "serving; try: metaledger status, metaledger send Hello hi, metaledger consume Hello --group g,"
echo "  metaledger cluster restart n1 --data-dir $data"
echo "(etcdctl works too: ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:$base get greeting); Ctrl-C to stop"
wait $cluster
