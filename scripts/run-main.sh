#!/usr/bin/env bash
# The main job: install what is missing, build, and run an all-reduce benchmark on 4 local ranks
# (coll-perf, nccl-tests style: 8 B to 64 MiB, x4 steps, every result checked).
# KCOLL_SKIP_SETUP=1 skips the install step.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export PATH="$ROOT/.deps/bin:$PATH"

if [ "${KCOLL_SKIP_SETUP:-0}" != 1 ]; then
    "$ROOT/scripts/setup.sh"
fi
"$ROOT/scripts/build.sh"

# --check 1 is nccl-tests' -c 1 (check every result); its long form means the same in both.
echo "run-main: build/tools/coll-run -n 4 build/tools/coll-perf -b 8 -e 64M -f 4 --check 1"
exec "$ROOT/build/tools/coll-run" -n 4 "$ROOT/build/tools/coll-perf" -b 8 -e 64M -f 4 --check 1
