#!/usr/bin/env bash
# Refresh the console's vendored chart library: uPlot's built files and its licence, copied
# from the npm package into console/static/vendor/uplot/ (committed: a wheel user needs no
# npm and no build step). Usage: scripts/vendor_uplot.sh [VERSION]
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-1.6.32}"
dest=console/static/vendor/uplot
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack "uplot@$version" --silent >/dev/null && tar xzf "uplot-$version.tgz")
mkdir -p "$dest"
cp "$tmp/package/dist/uPlot.iife.min.js" "$tmp/package/dist/uPlot.min.css" "$dest/"
cp "$tmp/package/LICENSE" "$dest/LICENSE"
echo "$version" > "$dest/VERSION"
echo "uPlot $version -> $dest"
