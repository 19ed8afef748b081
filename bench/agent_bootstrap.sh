#!/usr/bin/env bash
# Bootstrap N coll-agents of one Indexed Job against the fake API server and report API requests
# per agent and the time until every rank's agent answered hello (all ranks ready).
#   bench/agent_bootstrap.sh [BUILD_DIR] [N...]      (default: build-agent, 64 128 256)
# Not a test: prints a table; exits non-zero only if a bootstrap fails.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build-agent}"
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(64 128 256)
agent="$build/k8s-agent/coll-agent"
hello="$build/tests/agent/agent_hello_check"
for b in "$agent" "$hello"; do
  [ -x "$b" ] || { echo "agent_bootstrap: $b not built (cmake --build $build --target coll-agent agent_hello_check)" >&2; exit 2; }
done
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
export KCOLL_ROOT="$here"
exec python3 - "$agent" "$hello" "${sizes[@]}" <<'PY'
import os, re, sys, time
sys.path.insert(0, os.path.join(os.environ["KCOLL_ROOT"], "tests", "agent"))
from harness import Cluster, hello

agent, hello_bin, sizes = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:]]
print("%6s %10s %12s %12s %12s %10s %8s" % ("agents", "ready_s", "requests", "req/agent",
                                             "max_nonroot", "watches", "root_req"))
rc = 0
for n in sizes:
    cl = Cluster(agent, bookmark_interval=5.0)
    try:
        _, pods = cl.add_job("bench", n)
        cl.control("/reset-counts", {})
        t0 = time.time()
        agents = [cl.start_agent(p) for p in pods]
        code, out = hello(hello_bin, [a["sock"] for a in agents], check=n, timeout_ms=120000)
        ready = time.time() - t0
        if code != 0:
            print(out[-2000:])
            rc = 1
        counts = {}
        for ua, c in cl.control("/counts").items():
            m = re.search(r"\(team-a/(bench-\d+)-", ua)
            if m:
                counts[m.group(1)] = c
        req = sum(c["requests"] for c in counts.values())
        watches = sum(c["watches"] for c in counts.values())
        nonroot = max(c["requests"] for k, c in counts.items() if k != "bench-0")
        root = counts.get("bench-0", {}).get("requests", 0)
        print("%6d %10.2f %12d %12.2f %12d %10d %8d" % (n, ready, req, req / n, nonroot,
                                                        watches, root), flush=True)
    finally:
        cl.close()
sys.exit(rc)
PY
