#!/usr/bin/env bash
# The main job: install what is missing, build, and run an all-reduce benchmark on 4 local ranks,
# each served by its own coll-agent in standalone mode as a pod's kcoll sidecar would (no cluster
# needed): coll-run --agent starts the agents, the ranks create their communicator with
# coll_comm_init_agent, and coll-perf (nccl-tests style) sweeps 8 B to 64 MiB in x2 steps,
# checking every result (-c 1). KCOLL_SKIP_SETUP=1 skips the install step.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export PATH="$ROOT/.deps/bin:$PATH"

if [ "${KCOLL_SKIP_SETUP:-0}" != 1 ]; then
    "$ROOT/scripts/setup.sh"
fi
"$ROOT/scripts/build.sh"

if [ ! -x "$ROOT/build/k8s-agent/coll-agent" ]; then
    echo "run-main: build/k8s-agent/coll-agent was not built (its -dev packages are missing:" \
        "run scripts/setup.sh)" >&2
    exit 1
fi
echo "run-main: build/tools/coll-run -n 4 --agent build/tools/coll-perf -C all_reduce -b 8 -e 64M -f 2 -c 1"
exec "$ROOT/build/tools/coll-run" -n 4 --agent "$ROOT/build/tools/coll-perf" \
    -C all_reduce -b 8 -e 64M -f 2 -c 1
