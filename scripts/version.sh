#!/usr/bin/env bash
# The one version of kcoll: project(kcoll VERSION x.y.z) in CMakeLists.txt. The library's
# COLL_VERSION_STRING and coll-agent --version default to it; the Dockerfile's KCOLL_VERSION
# default, the chart's version, appVersion and kcoll.io/library-version annotation must equal it
# (tests/deploy/version_test.py fails when they drift).
#   scripts/version.sh          print it
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=$(sed -n 's/^project(kcoll VERSION \([0-9][0-9.]*\)[ )].*/\1/p' "$ROOT/CMakeLists.txt")
if [ -z "$version" ]; then
    echo "version.sh: error: no 'project(kcoll VERSION x.y.z ...)' line in $ROOT/CMakeLists.txt" >&2
    exit 1
fi
echo "$version"
