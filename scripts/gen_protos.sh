#!/usr/bin/env bash
# Regenerate the Python protobuf and gRPC code from protos/**/*.proto.
# Usage: scripts/gen_protos.sh [--check]
#   --check  regenerate into a temp dir and fail if the committed code differs (CI drift check).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$PWD
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mapfile -t files < <(find protos -name '*.proto' -not -path 'protos/apache/*' | sort)
python3 -m grpc_tools.protoc -I . --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" "${files[@]}"
# RocketMQ 5's apache.rocketmq.v2 (copied unchanged from apache/rocketmq-apis) imports its files as
# apache/rocketmq/v2/...: generate from protos/ as the root, then point the generated imports at
# protos.apache (the descriptor file names stay apache/rocketmq/v2/*.proto).
mapfile -t apache < <(cd protos && find apache -name '*.proto' | sort)
(cd protos && python3 -m grpc_tools.protoc -I . --python_out="$out/protos" --pyi_out="$out/protos" \
  --grpc_python_out="$out/protos" "${apache[@]}")
find "$out/protos/apache" -name '*_pb2*.py*' -exec sed -i -E \
  's/^from apache\.rocketmq\.v2 import /from protos.apache.rocketmq.v2 import /' {} +
files+=("${apache[@]}")
if [ "${1:-}" = "--check" ]; then
  status=0
  while IFS= read -r f; do
    if ! cmp -s "$out/$f" "$f"; then echo "generated code drifted from protos/: $f (run scripts/gen_protos.sh)"; status=1; fi
  done < <(cd "$out" && find protos -name '*_pb2*.py*' | sort)
  # generated files that no longer have a .proto
  while IFS= read -r f; do
    [ -e "$out/$f" ] || { echo "stale generated file: $f"; status=1; }
  done < <(find protos -name '*_pb2*.py*' | sort)
  exit $status
fi
echo "generated ${#files[@]} proto files"
