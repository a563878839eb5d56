#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need, runs the static
# checks, then every pytest layer. What it installs, each only when missing:
#   apt-get (needs root): etcd-server, etcd-client (a real etcd and etcdctl to test against),
#                         docker-compose (to validate docker-compose.yml), nats-server (NATS
#                         JetStream, the broker benchmark's peer: tests/integration/test_bench_jetstream.py),
#                         redis-server and redis-tools (the Redis replicator's source, redis-cli,
#                         redis-check-rdb: tests/integration/replicator/redis/), iptables (the
#                         network fault tests drop packets in their own namespaces: tests/faults/net/),
#                         chromium and chromium-driver (the web console's browser tests, through
#                         selenium: tests/integration/console/test_console_browser.py), golang-go and
#                         golang-google-grpc-dev (the Go gRPC front, `serve --grpc-front go`,
#                         built offline by scripts/build_front.sh);
#   pip: this project with its dev extras (pip install -e '.[dev]');
#   npm: tests/js's pinned RocketMQ clients, and the etcd3 client with mocha and TypeScript for
#        its own test suite (npm ci; needs Node.js and npm).
# The Spark tests need a Java runtime, which it does not install.
# Usage: scripts/test.sh [--pure] [extra pytest args]
#   By default the unit and property tests run first on the plain (pure-Python) build, then
#   scripts/build_mypyc.sh compiles scripts/mypyc_modules.txt in place (it compiles into
#   build/mypyc-stage while the static checks run, and puts the .so files beside their
#   modules once the pure-Python run is done) and every pytest layer
#   below runs against the compiled build (METALEDGER_MYPYC_EXPECT=1:
#   tests/unit/test_mypyc_agreement.py checks each listed module imported compiled); the .so
#   files are removed at the end. Only unit+property run twice, so the suite does not double
#   (and of them not the slow ones, which import no compiled module).
#   --pure: no compiled build; every layer runs once on the .py files. (--mypyc, the old
#   opt-in, is accepted and changes nothing.)
#   Two pytest processes at a time (pytest-xdist, a test file to one process: some unit
#   tests of one file share process-wide state, a clock's stamp lag, context variables) run
#   the unit and property tests, and the integration and end-to-end layers, whose servers
#   are processes of their own; the cluster and fault tests, whose
#   timing is part of what they check (elections, heals, failovers within seconds), run one
#   at a time after them. METALEDGER_TEST_WORKERS=N sets the processes (0: all in this one).
#   Extra pytest args go to every run.
set -euo pipefail
cd "$(dirname "$0")/.."
workers="${METALEDGER_TEST_WORKERS:-2}"
mypyc=1
case "${1:-}" in
  --pure) mypyc=0; shift ;;
  --mypyc) shift ;;
esac
export DEBIAN_FRONTEND=noninteractive
need_apt=()
command -v etcd >/dev/null || need_apt+=(etcd-server)
command -v etcdctl >/dev/null || need_apt+=(etcd-client)
command -v docker-compose >/dev/null || need_apt+=(docker-compose)
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
# Debian installs it in /usr/sbin, which a non-login PATH may lack
command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || need_apt+=(nats-server)
# the network fault tests (tests/faults/net) drop packets with iptables in their namespaces
command -v iptables >/dev/null || [ -x /usr/sbin/iptables ] || need_apt+=(iptables)
# libfuse 2 for fusepy: tests/faults/lazyfs.py, the filesystem that drops unsynced writes
ldconfig -p | grep -q 'libfuse\.so\.2' || need_apt+=(libfuse2)
# libfaketime: tests/faults/test_clocks.py and test_clocks_broker.py step one member's clock while it runs
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] || need_apt+=(faketime)
# headless Chromium and its WebDriver for the web console's browser tests
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
[ -x /usr/bin/chromedriver ] || need_apt+=(chromium-driver)
# the Go gRPC front: Go and grpc-go's sources (GOPATH mode: nothing downloaded)
command -v go >/dev/null || need_apt+=(golang-go)
[ -d /usr/share/gocode/src/google.golang.org/grpc ] || need_apt+=(golang-google-grpc-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== apt-get install ${need_apt[*]}"
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
echo "== pip install -e .[dev]"
python3 -m pip install -q --disable-pip-version-check -e '.[dev]' 2>&1 | grep -v -e '^WARNING: Location' -e 'Running pip as' || true
# every pinned package, not only the folder: an older checkout's node_modules lacks the newer ones
# (each one's package.json: the @types packages have nothing else to resolve)
if ! node -e 'for (const d in require("./tests/js/package.json").dependencies) require.resolve(d + "/package.json", {paths: ["tests/js"]})' 2>/dev/null; then
  echo "== npm ci (tests/js: ali-ons and rocketmq-client-nodejs, real RocketMQ clients; etcd3 and its suite's tools)"
  npm ci --prefix tests/js --no-audit --no-fund --silent
fi
build_pid=""
# the compile runs in a session of its own: stopping it stops its compilers too
# (a compile stopped before setsid made its session is not a group yet: then the process itself)
stop_build() { if [ -n "$build_pid" ]; then kill -- "-$build_pid" 2>/dev/null || kill "$build_pid" 2>/dev/null || true; wait "$build_pid" 2>/dev/null || true; fi; }
if [ "$mypyc" -eq 1 ]; then
  # the C compile takes a minute or two of one core: beside the static checks, not after them
  bash scripts/build_mypyc.sh --clean
  build_log=$(mktemp)
  setsid -w bash scripts/build_mypyc.sh --stage >"$build_log" 2>&1 &
  build_pid=$!
  trap stop_build EXIT  # a failing check stops the script, and the compile with it
fi
echo "== generated protobuf code matches protos/"
bash scripts/gen_protos.sh --check
echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy (core packages)"
mypy
echo "== import layering (the import-linter contracts in pyproject.toml)"
lint-imports
echo "== docker-compose.yml"
METALEDGER_CLUSTER_PASSWORD=validate-only docker-compose -f docker-compose.yml config -q
echo "== the Go gRPC front (gofmt, go vet, go build: scripts/build_front.sh)"
bash scripts/build_front.sh
if [ "$mypyc" -eq 1 ]; then
  echo "== pytest (unit and property, pure-Python build)"
  pure_rc=0
  # not the slow ones: none imports a compiled module (tests/unit/test_test_script.py checks
  # it), so the compiled build's run below runs the same code
  python3 -m pytest -m "not spark and not slow" tests/unit tests/property \
    -n "$workers" --dist loadfile "$@" || pure_rc=$?
  if [ "$pure_rc" -ne 0 ]; then
    echo "== pytest (unit and property, pure-Python build): FAILED (exit $pure_rc); the compiled build's runs are not started"
    exit "$pure_rc"
  fi
  echo "== mypyc build (scripts/mypyc_modules.txt)"
  build_rc=0
  wait "$build_pid" || build_rc=$?
  build_pid=""
  cat "$build_log"
  rm -f "$build_log"
  if [ "$build_rc" -ne 0 ]; then
    echo "== mypyc build: FAILED (exit $build_rc)"
    exit "$build_rc"
  fi
  trap 'bash scripts/build_mypyc.sh --clean' EXIT
  bash scripts/build_mypyc.sh --install
  export METALEDGER_MYPYC_EXPECT=1
fi
# Both pytest runs run whatever the first one's outcome; the script reports both and fails
# if either failed (set -e would stop at the first and never say how the Spark run went).
echo "== pytest (unit and property)"
unit_rc=0
# --durations: the slowest tests, for keeping the suite inside its time budget
python3 -m pytest -m "not spark" --durations=10 tests/unit tests/property \
  -n "$workers" --dist loadfile "$@" || unit_rc=$?
echo "== pytest (integration, end-to-end: $workers processes)"
par_rc=0
python3 -m pytest -m "not spark" -n "$workers" --dist loadfile --durations=30 \
  tests/integration tests/e2e "$@" || par_rc=$?
echo "== pytest (cluster and fault tests: one at a time)"
serial_rc=0
python3 -m pytest -m "not spark" --durations=30 tests/cluster tests/faults "$@" || serial_rc=$?
main_rc=$unit_rc
if [ "$main_rc" -eq 0 ]; then main_rc=$par_rc; fi
if [ "$main_rc" -eq 0 ]; then main_rc=$serial_rc; fi
echo "== pytest (Spark: its own run, one JVM for the session)"
spark_rc=0
python3 -m pytest -m spark tests/spark "$@" || spark_rc=$?
outcome() { if [ "$1" -eq 0 ]; then echo passed; else echo "FAILED (exit $1)"; fi; }
echo "== pytest (everything but Spark): $(outcome "$main_rc")"
echo "== pytest (Spark): $(outcome "$spark_rc")"
if [ "$main_rc" -ne 0 ]; then exit "$main_rc"; fi
exit "$spark_rc"
