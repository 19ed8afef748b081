#!/usr/bin/env bash
# Several ranks per pod in a network-namespace lab (label pods): 3 "pods" (network namespaces on
# one bridge, each pod's processes in their own UTS and IPC namespace with hostname pod0..pod2,
# so kcoll sees three hosts) x 4 ranks. One standalone coll-agent per pod serves its 4 local ranks
# (LOCAL_RANK 0..3), which talk through shared memory inside the pod and TCP across.
#
#   1  e2e_check in every rank: all_reduce, all_gather, broadcast and all_to_all exact
#   2  coll-perf all_reduce of BYTES (default 16M) with the flat ring (COLL_HIER_MIN=0) and with
#      the hierarchical one, one after the other: the bytes every pod's veth sent (its
#      statistics: nothing else runs in these namespaces) show that fewer bytes cross pods
#      hierarchically; both results are checked (coll-perf -c 1)
#
# usage: pods_lab.sh <coll-agent> <e2e_check> <coll-perf> [BYTES]   (root only: exits 77 otherwise)
# PODS_LAB_PER=2 PODS_LAB_BYTES=64M pods_lab.sh ... runs the benchmark of docs/benchmarks.md;
# PODS_LAB_RATE=1gbit limits each pod's egress (tc tbf) to a link slower than memory.
set -u

AGENT=${1:-}
CHECK=${2:-}
PERF=${3:-}
BYTES=${4:-${PODS_LAB_BYTES:-16M}}
PER=${PODS_LAB_PER:-4}
NPODS=3
pass=0
fail=0
note() { echo "[pods-lab] $*"; }
ok() {
    pass=$((pass + 1))
    echo "[pods-lab] ok   $*"
}
bad() {
    fail=$((fail + 1))
    echo "[pods-lab] FAIL $*"
}
skip() {
    echo "SKIPPED: $*"
    exit 77
}

if [ ! -x "$AGENT" ] || [ ! -x "$CHECK" ] || [ ! -x "$PERF" ]; then
    echo "usage: pods_lab.sh <coll-agent> <e2e_check> <coll-perf> [BYTES]"
    exit 2
fi
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces and veth links"
command -v ip >/dev/null 2>&1 || skip "iproute2 (ip) is not installed"
unshare --uts --ipc true 2>/dev/null || skip "unshare --uts --ipc is not available"

TAG=kpl$$
SW=${TAG}sw
WORK=$(mktemp -d /tmp/kcoll-podslab.XXXXXX)
chmod 755 "$WORK"
PIDS=()
cleanup() {
    local p i
    for p in "${PIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null
    done
    wait 2>/dev/null
    for i in $(seq 0 $((NPODS - 1))); do
        ip netns del "${TAG}p$i" 2>/dev/null
    done
    ip netns del "$SW" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

setup() {
    ip netns add "$SW" && ip -n "$SW" link set lo up &&
        ip -n "$SW" link add br0 type bridge && ip -n "$SW" link set br0 up || return 1
    for i in $(seq 0 $((NPODS - 1))); do
        ip netns add "${TAG}p$i" && ip -n "${TAG}p$i" link set lo up &&
            ip link add eth0 netns "${TAG}p$i" type veth peer name port$i netns "$SW" &&
            ip -n "$SW" link set port$i master br0 && ip -n "$SW" link set port$i up &&
            ip -n "${TAG}p$i" addr add 10.78.1.$((i + 1))/24 dev eth0 &&
            ip -n "${TAG}p$i" link set eth0 up || return 1
    done
}
# PODS_LAB_RATE=1gbit: each pod's egress limited (tc tbf), a link slower than memory between pods
if [ -n "${PODS_LAB_RATE:-}" ]; then
    setup_rate() {
        for i in $(seq 0 $((NPODS - 1))); do
            tc -n "${TAG}p$i" qdisc add dev eth0 root tbf rate "$PODS_LAB_RATE" burst 256kb \
                latency 50ms || return 1
        done
    }
else
    setup_rate() { :; }
fi
{ setup && setup_rate; } >"$WORK/setup.log" 2>&1 || {
    cat "$WORK/setup.log"
    skip "could not build the namespace topology (veth/bridge support?)"
}

# the standalone topology: one entry per pod, 4 ranks each
{
    printf '{"job": "pods-lab", "port": 29611, "secret": "%s", "transport": "Socket",\n' \
        "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
    printf ' "bootstrapTimeoutSeconds": 60, "timeoutSeconds": 120, "localRanksTimeoutSeconds": 30,\n'
    printf ' "ranksPerPod": %d, "pods": [' "$PER"
    for i in $(seq 0 $((NPODS - 1))); do
        [ "$i" -gt 0 ] && printf ', '
        printf '{"podRank": %d, "pod": "pod%d", "node": "node%d", "interface": "eth0", "address": "10.78.1.%d"}' \
            "$i" "$i" "$i" $((i + 1))
    done
    printf ']}\n'
} >"$WORK/topology.json"

# tx bytes of pod i's veth (everything that left the pod)
tx() { ip netns exec "${TAG}p$1" cat /sys/class/net/eth0/statistics/tx_bytes; }

export AGENT WORK
export TOPO="$WORK/topology.json"
# POD is the pod index inside each sh (its $1)
run_job() {
    local tag=$1 i
    shift
    local pids=()
    for i in $(seq 0 $((NPODS - 1))); do
        POD=$i ip netns exec "${TAG}p$i" unshare --uts --ipc "$WORK/pod.sh" "$i" "$tag" "$@" &
        pids+=($!)
        PIDS+=($!)
    done
    local rc=0
    for i in "${pids[@]}"; do wait "$i" || rc=1; done
    return $rc
}
cat >"$WORK/pod.sh" <<'EOF'
#!/bin/sh
# one pod: its agent and its PER ranks, in the pod's namespaces
pod=$1
tag=$2
shift 2
hostname "pod$pod"
sock="$WORK/agent-$tag-$pod.sock"
"$AGENT" --topology "$TOPO" --rank "$pod" --socket "$sock" --health-port 0 --min-shm-mb 0 \
    >"$WORK/agent-$tag-$pod.log" 2>&1 &
apid=$!
w=0
while [ ! -S "$sock" ] && [ $w -lt 200 ]; do
    sleep 0.05
    w=$((w + 1))
done
l=0
rp=""
while [ $l -lt "$PER" ]; do
    env -u COLL_LOCAL_RANK COLL_AGENT_SOCKET="$sock" LOCAL_RANK=$l LOCAL_WORLD_SIZE="$PER" \
        "$@" >"$WORK/rank-$tag-$pod-$l.log" 2>&1 &
    rp="$rp $!"
    l=$((l + 1))
done
rc=0
for p in $rp; do
    wait "$p" || rc=1
done
kill "$apid" 2>/dev/null
wait "$apid" 2>/dev/null
exit $rc
EOF
chmod 755 "$WORK/pod.sh"
export PER

N=$((NPODS * PER))
note "$NPODS pods x $PER ranks on 10.78.1.1-$NPODS (shared memory inside a pod, TCP across${PODS_LAB_RATE:+, egress of every pod limited to $PODS_LAB_RATE})"

# ---- 1: correctness ----
if run_job check timeout 150 "$CHECK" --count 262144; then
    ok "all $N ranks exit 0"
else
    bad "a rank failed"
fi
good=0
for i in $(seq 0 $((NPODS - 1))); do
    for l in $(seq 0 $((PER - 1))); do
        f="$WORK/rank-check-$i-$l.log"
        r=$((i * PER + l))
        if grep -q "^init ok rank=$r nranks=$N$" "$f" && grep -q "^all_to_all ok" "$f" &&
            grep -q "^all_reduce ok count=262144" "$f" && grep -q "^broadcast ok" "$f" &&
            ! grep -q WRONG "$f"; then
            good=$((good + 1))
        else
            note "pod $i local $l:"
            tail -5 "$f"
        fi
    done
done
[ "$good" -eq "$N" ] && ok "rank = pod x $PER + local rank; all_reduce, all_gather, broadcast, all_to_all exact on $good of $N" ||
    bad "only $good of $N ranks checked out"
grep -h "AGENT-STANDALONE" "$WORK"/agent-check-*.log | sed 's/^/[pods-lab]   /'

# ---- 2: bytes across pods, flat ring vs hierarchical ----
declare -A BUSBW CROSS
for mode in flat hier; do
    hmin=64K
    [ "$mode" = flat ] && hmin=0
    before=0
    for i in $(seq 0 $((NPODS - 1))); do before=$((before + $(tx "$i"))); done
    if ! run_job "$mode" env COLL_HIER_MIN=$hmin timeout 300 "$PERF" \
        -C all_reduce -b "$BYTES" -e "$BYTES" -n 5 -w 1 -c 1; then
        bad "$mode: coll-perf failed"
        tail -20 "$WORK"/rank-"$mode"-0-0.log
        continue
    fi
    after=0
    for i in $(seq 0 $((NPODS - 1))); do after=$((after + $(tx "$i"))); done
    line=$(grep -E "^ +[0-9]+ +[0-9]+ +float32" "$WORK/rank-$mode-0-0.log" | tail -1)
    # the same all_reduces (and bootstrap) in both modes: the totals compare directly
    CROSS[$mode]=$((after - before))
    BUSBW[$mode]=$(echo "$line" | awk '{print $8 "/" $12}')
    wrong=$(echo "$line" | awk '{print $9 + $13}')
    note "$mode: $line"
    note "$mode: ${CROSS[$mode]} bytes left the pods' veths"
    [ "$wrong" = 0 ] && ok "$mode: coll-perf -c 1 finds no wrong element" || bad "$mode: $wrong wrong elements"
done
if [ -n "${CROSS[flat]:-}" ] && [ -n "${CROSS[hier]:-}" ]; then
    note "bytes across pods, coll-perf all_reduce of $BYTES (same calls): flat ring ${CROSS[flat]}, hierarchical ${CROSS[hier]} ($((100 * CROSS[hier] / CROSS[flat])) %); busbw (out/in place, GB/s): flat ${BUSBW[flat]}, hierarchical ${BUSBW[hier]}"
    [ "${CROSS[hier]}" -lt "${CROSS[flat]}" ] && ok "fewer bytes cross pods with the hierarchical all_reduce" ||
        bad "the hierarchical all_reduce did not move fewer bytes across pods"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
