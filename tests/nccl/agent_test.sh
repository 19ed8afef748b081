#!/usr/bin/env bash
# ncclCommInitRank under the kcoll agent (coll-run --agent: one standalone coll-agent per rank, as
# the sidecar in a pod): the agent's interface pin wins over a wrong COLL_SOCKET_IFNAME (for the
# unique id's root and for the communicator), the ranks report Ready to their agents, and a pinned
# version this library does not match fails the init naming both versions.
#   agent_test.sh COLL_RUN COLL_AGENT NCCL_AGENT_PROGRAM
set -uo pipefail
run=$1 agent=$2 prog=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
fail() {
    echo "FAIL: $1"
    sed 's/^/  /' "$tmp/out" | tail -n 40
    status=1
}

# 1. pins: the ranks inherit COLL_SOCKET_IFNAME=kcoll-nosuch0 (alone it fails: no such
# interface); the agents pin lo (coll-run --ifname lo), which must win
COLL_SOCKET_IFNAME=kcoll-nosuch0 COLL_DEBUG=INFO timeout 120 "$run" -n 3 --timeout 100 \
    --ifname lo --agent="$agent" "$prog" 3 "$tmp/id1" >"$tmp/out" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    fail "3 ranks under the agent with a wrong COLL_SOCKET_IFNAME: exit $rc"
else
    for r in 0 1 2; do
        grep -q "^\[rank $r\] all_reduce ok sum=6$" "$tmp/out" || fail "rank $r: no all_reduce ok"
        grep -Eq "^\[agent $r\] .*AGENT-REPORT library report: phase=Ready" "$tmp/out" ||
            fail "rank $r reported no Ready to its agent"
    done
    grep -q "bootstrap root on lo, the interface the kcoll agent pins" "$tmp/out" ||
        fail "ncclGetUniqueId did not take the agent's interface"
    grep -q "pinned by the kcoll agent of pod" "$tmp/out" ||
        fail "ncclCommInitRank did not say that the agent's pins apply"
    [ $status = 0 ] && echo "ok: the agent's pins win over COLL_SOCKET_IFNAME=kcoll-nosuch0; Ready reported"
fi

# 2. a pinned version this library does not match
timeout 120 "$run" -n 2 --timeout 100 --agent="$agent" --pin-version 9.9.9 "$prog" 2 "$tmp/id2" \
    >"$tmp/out" 2>&1
rc=$?
line=$(grep -m1 "init failed" "$tmp/out")
if [ $rc -ne 3 ]; then
    fail "pin 9.9.9: exit $rc, want 3 (the init fails)"
elif ! grep -q "pins 9.9.9" <<<"$line" || ! grep -q "runs kcoll" <<<"$line"; then
    fail "pin 9.9.9: the message does not name both versions: $line"
else
    echo "ok: pin 9.9.9 refused: $line"
fi
exit $status
