#!/usr/bin/env bash
# Builds the Go gRPC front (front/*.go -> front/bin/metaledger-front) offline, from Debian's
# Go packages (golang-go, golang-google-grpc-dev: GOPATH mode, no module downloads).
# `metaledger serve --grpc-front go` runs it (docs/operations.md, "The Go gRPC front").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
gocode=/usr/share/gocode
if ! command -v go > /dev/null || [ ! -d "$gocode/src/google.golang.org/grpc" ]; then
    echo "build_front: needs Go and grpc-go: apt-get install golang-go golang-google-grpc-dev" >&2
    exit 1
fi
export GO111MODULE=off GOPATH="$gocode" GOCACHE="${GOCACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/go-build}"
cd "$root/front"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
    echo "build_front: not gofmt-formatted: $unformatted" >&2
    exit 1
fi
go vet .
go build -trimpath -o bin/metaledger-front.tmp .
mv bin/metaledger-front.tmp bin/metaledger-front
echo "build_front: $root/front/bin/metaledger-front"
