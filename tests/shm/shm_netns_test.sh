#!/usr/bin/env bash
# Shared memory inside a host, sockets between hosts, in one communicator, with real namespaces:
# two "nodes", each a network namespace on a bridge (10.77.2.0/24) whose ranks share one IPC
# and UTS namespace (hostname node1 / node2), so that kcoll sees two hosts. Five ranks: 0, 2
# and 4 on node1, 1 and 3 on node2 (interleaved, so that every ring step crosses hosts).
#
#   ok    checked all_reduces, small (recursive doubling) and large (ring): every rank logs
#         that its node-mates are reached over shared memory and the others over sockets
#   kill  rank 2 (node1) is SIGKILLed mid-loop: every other rank, on either node, fails within
#         a second or two naming rank 2, and no kcoll segment is left in /dev/shm
#
# usage: shm_netns_test.sh <netns_root> <netns_rank>     (root only: exits 77 otherwise)
set -u

ROOTPROG=${1:-}
RANKPROG=${2:-}
pass=0
fail=0
note() { echo "[shm-netns] $*"; }
ok() { pass=$((pass + 1)); }
bad() {
    fail=$((fail + 1))
    echo "[shm-netns] FAIL: $*"
}
skip() {
    echo "SKIPPED: $*"
    echo "0 passed, 0 failed"
    exit 77
}

if [ ! -x "$ROOTPROG" ] || [ ! -x "$RANKPROG" ]; then
    echo "usage: shm_netns_test.sh <netns_root> <netns_rank>"
    exit 2
fi
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces and veth links"
for c in ip unshare nsenter; do
    command -v $c >/dev/null 2>&1 || skip "$c is not installed"
done

TAG=kcs$$
NS=("${TAG}n1" "${TAG}n2")
SW=${TAG}sw
WORK=$(mktemp -d /tmp/kcoll-shm-netns.XXXXXX)
HOLDERS=()
PIDS=()

cleanup() {
    local p ns
    for p in "${PIDS[@]}" "${HOLDERS[@]}"; do
        kill -KILL "$p" 2>/dev/null
    done
    wait 2>/dev/null
    for ns in "${NS[@]}" "$SW"; do
        ip netns del "$ns" 2>/dev/null
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

setup() {
    local i
    for ns in "${NS[@]}" "$SW"; do
        ip netns add "$ns" || return 1
        ip -n "$ns" link set lo up || return 1
    done
    ip -n "$SW" link add br0 type bridge || return 1
    ip -n "$SW" link set br0 up || return 1
    for i in 0 1; do
        ip link add eth1 netns "${NS[$i]}" type veth peer name "p$i" netns "$SW" || return 1
        ip -n "$SW" link set "p$i" master br0 || return 1
        ip -n "$SW" link set "p$i" up || return 1
        ip -n "${NS[$i]}" addr add "10.77.2.$((i + 1))/24" dev eth1 || return 1
        ip -n "${NS[$i]}" link set eth1 up || return 1
    done
}
if ! ip netns add "${TAG}probe" 2>"$WORK/err"; then
    skip "cannot create network namespaces: $(cat "$WORK/err")"
fi
ip netns del "${TAG}probe"
unshare --ipc --uts true 2>/dev/null || skip "unshare --ipc --uts is not available"
if ! setup >"$WORK/setup.log" 2>&1; then
    cat "$WORK/setup.log"
    skip "could not build the namespace topology (veth/bridge support?)"
fi

# One holder process per node owns the node's namespaces (network, IPC, UTS, mount); ranks
# enter them with nsenter, so that the test knows each rank's pid. Each node has a /dev/shm of
# its own (a tmpfs in the mount namespace `ip netns exec` made), as a host does: the segment check
# at the end sees this test's segments only, not those of whatever else runs on the machine.
for i in 0 1; do
    # shellcheck disable=SC2016 # $0 belongs to the inner shell
    ip netns exec "${NS[$i]}" unshare --ipc --uts sh -c \
        'mount -t tmpfs -o mode=1777,size=512m "kcoll-$0" /dev/shm && hostname "$0" &&
         exec sleep 600' "node$((i + 1))" &
    HOLDERS+=($!)
done
sleep 0.3
on_node() { # node index, command...
    local h=${HOLDERS[$1]}
    shift
    nsenter -t "$h" -n -i -u -m "$@"
}
# start_on <node index> <command...> &: as on_node, but the background job's pid ($!) is the
# command's own (the subshell becomes nsenter, which becomes the command)
start_on() {
    local h=${HOLDERS[$1]}
    shift
    exec nsenter -t "$h" -n -i -u -m "$@"
}
NODE_OF=(0 1 0 1 0) # rank -> node
NRANKS=5
note "node1 (10.77.2.1): ranks 0 2 4 | node2 (10.77.2.2): ranks 1 3"
if [ "$(on_node 0 hostname)" != node1 ] || [ "$(on_node 1 hostname)" != node2 ]; then
    skip "could not enter the node namespaces"
fi

# start_job <name> <iterations> <count>: a root on node1 and the five ranks
start_job() {
    local out="$WORK/$1.root" r k
    start_on 0 env COLL_BOOTSTRAP_TIMEOUT=20 "$ROOTPROG" 10.77.2.0/24 60 >"$out" 2>&1 &
    PIDS+=($!)
    ID=""
    for ((k = 0; k < 100; k++)); do
        ID=$(sed -n 's/^ID //p' "$out")
        [ -n "$ID" ] && break
        sleep 0.1
    done
    if [ -z "$ID" ]; then
        bad "$1: the root did not start: $(cat "$out")"
        return 1
    fi
    RANK_PIDS=()
    for ((r = 0; r < NRANKS; r++)); do
        start_on "${NODE_OF[$r]}" env COLL_UNIQUE_ID="$ID" COLL_RANK=$r COLL_NRANKS=$NRANKS \
            COLL_SOCKET_IFNAME=10.77.2.0/24 COLL_TIMEOUT=10 COLL_BOOTSTRAP_TIMEOUT=20 \
            COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=INIT "$RANKPROG" "$2" "$3" >"$WORK/$1.r$r" 2>&1 &
        RANK_PIDS+=($!)
        PIDS+=($!)
    done
}

wait_job() { # name seconds
    local end=$((SECONDS + $2)) p alive
    while :; do
        alive=0
        for p in "${RANK_PIDS[@]}"; do
            kill -0 "$p" 2>/dev/null && alive=$((alive + 1))
        done
        [ "$alive" -eq 0 ] && break
        if [ "$SECONDS" -ge "$end" ]; then
            bad "$1: $alive rank(s) still running after $2 s (hang); killed"
            for p in "${RANK_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
            break
        fi
        sleep 0.05
    done
    wait "${RANK_PIDS[@]}" 2>/dev/null
}

field() { # name rank field
    local line
    line=$(grep -m1 '^DIAG-RESULT ' "$WORK/$1.r$2")
    case "$3" in
    msg) echo "${line#*msg=}" ;;
    *) echo "$line" | sed -n "s/.* $3=\([^ ]*\).*/\1/p" ;;
    esac
}

check_transports() { # name
    local r want
    for ((r = 0; r < NRANKS; r++)); do
        if [ "${NODE_OF[$r]}" = 0 ]; then
            want="rank $r: 2 peers over shared memory, 2 over sockets"
        else
            want="rank $r: 1 peers over shared memory, 3 over sockets"
        fi
        if grep -qF "$want" "$WORK/$1.r$r"; then ok; else
            bad "$1: rank $r does not log \"$want\": $(grep -m1 'peers over' "$WORK/$1.r$r")"
        fi
    done
}

# ---- ok ----
for count in 2 262147; do
    name=ok$count
    note "--- $name: 3 checked all_reduces of $count float32"
    start_job $name 3 $count || continue
    wait_job $name 60
    for ((r = 0; r < NRANKS; r++)); do
        rc=$(field $name $r rc)
        if [ "$rc" = COLL_SUCCESS ] && [ "$(field $name $r bad)" = 0 ] &&
            [ "$(field $name $r iters)" = 3 ]; then ok; else
            bad "$name: rank $r: rc=${rc:-none} iters=$(field $name $r iters) bad=$(field $name $r bad): $(field $name $r msg)"
        fi
    done
    check_transports $name
done

# ---- kill ----
name=kill
victim=2
note "--- kill: rank $victim (node1) SIGKILLed in a loop of 1 MiB all_reduces"
if start_job $name 0 262144; then
    for ((k = 0; k < 200; k++)); do
        grep -q '^ITER 3$' "$WORK/$name.r$victim" && break
        sleep 0.05
    done
    vpid=${RANK_PIDS[$victim]}
    t0=$("$RANKPROG" --now)
    kill -KILL "$vpid"
    wait_job $name 40
    check_transports $name
    for ((r = 0; r < NRANKS; r++)); do
        [ $r = $victim ] && continue
        rc=$(field $name $r rc)
        msg=$(field $name $r msg)
        t=$(field $name $r t)
        case "$rc" in COLL_ERR_REMOTE | COLL_ERR_TIMEOUT) ok ;; *) bad "$name: rank $r returned ${rc:-nothing}: $msg" ;; esac
        if echo "$msg" | grep -qF "rank $victim (pid $vpid on node1"; then ok; else
            bad "$name: rank $r does not name rank $victim (pid $vpid on node1): $msg"
        fi
        if [ -n "$t" ] && awk -v t="$t" -v t0="$t0" 'BEGIN { exit !(t - t0 < 3) }'; then ok; else
            bad "$name: rank $r failed at ${t:-never}, not within 3 s of the kill at $t0"
        fi
        note "rank $r (node$((NODE_OF[r] + 1))): $rc $(awk -v t="${t:-0}" -v t0="$t0" 'BEGIN { printf "%.3f", t - t0 }') s after the kill: $msg"
        [ -n "$rc" ] || grep -v -e '^ITER' -e 'INFO' "$WORK/$name.r$r" | tail -5 | sed "s/^/  [r$r] /"
    done
fi

left=$(for i in 0 1; do on_node $i ls /dev/shm | sed "s|^|node$((i + 1)):|"; done 2>&1)
if [ -z "$left" ]; then ok; else bad "segments left in /dev/shm: $left"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
