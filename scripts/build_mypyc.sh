#!/usr/bin/env bash
# The optional mypyc build (issue 31), in place: a .so beside each module listed in
# scripts/mypyc_modules.txt (Python imports it before the .py), plus mypyc's shared runtime
# library (rmq/mypyc_runtime__mypyc.*.so: inside a package, so an editable install finds it). Needs mypy (the dev extras). Remove with --clean.
# Usage: scripts/build_mypyc.sh [--clean | --stage | --install]
#   --stage compiles into build/mypyc-stage only, leaving the tree pure-Python (scripts/test.sh
#   compiles while the static checks run); --install then puts the staged .so files beside
#   their modules and checks them, as a plain build does at its end.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=build/mypyc-stage
clean() {
  # the compiled modules and mypyc's group library (and an older build's <hash>__mypyc.*.so at the root)
  grep -v -e '^\s*#' -e '^\s*$' scripts/mypyc_modules.txt | while read -r src; do
    rm -f "${src%.py}".cpython-*.so
  done
  rm -f ./*__mypyc.cpython-*.so rmq/mypyc_runtime__mypyc.cpython-*.so
}
compile_to() {  # "--inplace", or "--build-lib DIR"
  METALEDGER_MYPYC=1 python3 setup.py -q build_ext "$@" 2>&1 \
    | grep -v -e '^\s*$' -e 'SetuptoolsDeprecationWarning' -e '^!!' -e '^\s*\*\*\*' \
        -e 'project.license' -e 'By 2027' -e 'or your builds' -e 'See https' -e 'corresp(dist' || true
}
case "${1:-}" in
  --clean)
    clean
    exit 0
    ;;
  --stage)
    rm -rf "$stage"
    compile_to --build-lib "$stage"
    exit 0
    ;;
  --install)
    clean
    [ -d "$stage" ] || { echo "build_mypyc.sh --install: nothing staged in $stage" >&2; exit 1; }
    (cd "$stage" && find . -name '*.so' -print0) | while IFS= read -r -d '' so; do
      cp "$stage/$so" "$so"
    done
    ;;
  "")
    clean
    compile_to --inplace
    ;;
  *)
    echo "usage: scripts/build_mypyc.sh [--clean | --stage | --install]" >&2
    exit 2
    ;;
esac
python3 - <<'PY'
import importlib, pathlib
for line in pathlib.Path("scripts/mypyc_modules.txt").read_text().splitlines():
    src = line.split("#", 1)[0].strip()
    if src:
        name = src[: -len(".py")].replace("/", ".")
        origin = importlib.import_module(name).__file__ or ""
        assert origin.endswith(".so"), f"{name} is not compiled: {origin}"
print("mypyc build: every listed module imports compiled")
PY
