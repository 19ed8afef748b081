#!/usr/bin/env bash
# Installs the npm packages of the deploy tests (tests/deploy/package.json, pinned by its
# package-lock.json) into .deps/node_modules. Idempotent: does nothing when the installed lock
# matches. scripts/setup.sh calls this; the deploy tests that need it skip (exit 77) without it.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SRC="$ROOT/tests/deploy"
DEPS="$ROOT/.deps"

command -v npm >/dev/null || {
    echo "setup-node: npm not found (apt-get install npm)" >&2
    exit 1
}
mkdir -p "$DEPS"
if [ -d "$DEPS/node_modules" ] && cmp -s "$SRC/package-lock.json" "$DEPS/package-lock.json"; then
    echo "setup-node: .deps/node_modules is up to date"
    exit 0
fi
cp "$SRC/package.json" "$SRC/package-lock.json" "$DEPS/"
(cd "$DEPS" && npm ci --no-audit --no-fund --ignore-scripts </dev/null)
echo "setup-node: installed $(cd "$DEPS" && ls node_modules | tr '\n' ' ')"
