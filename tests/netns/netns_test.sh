#!/usr/bin/env bash
# Network-namespace diagnostics: three "nodes" (network namespaces, each rank also in its own UTS
# and IPC namespace with hostname node1..node3) on one bridged network 10.77.1.0/24, with
# different interface names: bond0 on node1, eth1 on node2, ens5 on node3. node3 also has a
# decoy interface eth0 in 10.77.9.0/24 that reaches no other node (the bridge namespace is the
# nodes' default gateway and has no route there, so it answers with ICMP "net unreachable").
#
#   a0  the root and every rank pinned with COLL_SOCKET_IFNAME=bond,eth: the root on node3
#       listens on the decoy, ranks 0 and 1 cannot reach it -> COLL_ERR_TIMEOUT naming the root
#       address, rank 2 -> bootstrap timeout naming the missing ranks 0 and 1
#   a   the ranks pinned with bond,eth (the root by CIDR): rank 2 advertises 10.77.9.3; the
#       bootstrap root sees two networks, has rank 0 probe 10.77.9.3 (ICMP net unreachable) and
#       fails every rank, rank 2 included, within seconds and before any data connection, with
#       one message naming rank 2, node3, eth0, 10.77.9.3, 10.77.9.0/24, the job's 10.77.1.0/24
#       and the fix COLL_SOCKET_IFNAME=10.77.1.0/24
#   a2  as a, but node1 (rank 0, the prober) has no default route: its probe fails in connect()
#       itself; the same message and code are expected
#   a3  as a, but the switch drops the decoy's packets silently: the probe gets no answer and
#       the same message says so after its 3 s deadline
#   r   a routed fabric: node3 pinned by name to ib7 on its own subnet 10.77.5.0/24, which the
#       switch namespace routes to 10.77.1.0/24; the root's probe passes and the job runs
#   b   the fix: COLL_SOCKET_IFNAME=10.77.1.0/24 everywhere -> three different interface names,
#       one network, the all_reduces succeed
#   c   node2's link goes down mid-collective -> ranks 0 and 2 fail within COLL_TIMEOUT naming
#       rank 1 (saying whom they wait on meanwhile); rank 1 says its own link eth1 is down
#   d   nothing set on the ranks (the seed case): node3's first interface is the decoy, but the
#       root's address is on ens5's network, so auto-selection takes ens5 and the job runs
#   e   the root on the decoy, nothing set on the ranks, a long bootstrap timeout: ranks 0 and 1
#       get "no route" (ICMP net unreachable) and fail after 10 s, not at the bootstrap timeout,
#       naming their address and the CIDR fix
#   g   NCCL habits on node3 only: NCCL_SOCKET_IFNAME=ens5 is honoured (said in an INFO line),
#       and a typo COLL_SOCKET_IFNAM=ens5 gets a WARN naming COLL_SOCKET_IFNAME; the job runs
#   h   torchrun's variables, nothing else: MASTER_ADDR=10.77.1.1 (node1), MASTER_PORT, RANK,
#       WORLD_SIZE and COLL_JOB_SECRET on each node; rank 0 hosts the root; the job runs
#   f   a multi-host coll-run with nothing set: node1 runs coll-run --nnodes 3 --node-rank 0, which
#       prints the command for the others; node2 and node3 run it with their --node-rank; the
#       three ranks (one per node, node3's on ens5 although its first interface is the decoy)
#       run their all_reduces
#
# usage: netns_test.sh <netns_root> <netns_rank> [<coll-run>]   (root only: exits 77 otherwise)
set -u

ROOTPROG=${1:-}
RANKPROG=${2:-}
COLLRUN=${3:-}
pass=0
fail=0
note() { echo "[netns] $*"; }
ok() { pass=$((pass + 1)); }
bad() {
    fail=$((fail + 1))
    echo "[netns] FAIL: $*"
}
skip() {
    echo "SKIPPED: $*"
    echo "0 passed, 0 failed"
    exit 77
}
finish() {
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}

if [ ! -x "$ROOTPROG" ] || [ ! -x "$RANKPROG" ]; then
    echo "usage: netns_test.sh <netns_root> <netns_rank>"
    exit 2
fi
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces and veth links"
command -v ip >/dev/null 2>&1 || skip "iproute2 (ip) is not installed"

TAG=kcd$$
NS1=${TAG}n1
NS2=${TAG}n2
NS3=${TAG}n3
SW=${TAG}sw
WORK=$(mktemp -d /tmp/kcoll-netns.XXXXXX)
PIDS=()

cleanup() {
    local p ns
    for p in "${PIDS[@]}"; do
        kill -CONT "$p" 2>/dev/null
        kill -KILL "$p" 2>/dev/null
    done
    wait 2>/dev/null
    for ns in "$NS1" "$NS2" "$NS3" "$SW" "${TAG}probe"; do
        ip netns del "$ns" 2>/dev/null
    done
    if [ -n "${NETNS_KEEP:-}" ]; then
        echo "[netns] files kept in $WORK (NETNS_KEEP)"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

if ! ip netns add "${TAG}probe" 2>"$WORK/err"; then
    skip "cannot create network namespaces: $(cat "$WORK/err")"
fi
ip netns del "${TAG}probe"
# Each node also gets its own hostname and IPC namespace, so that kcoll sees three hosts.
if unshare --uts --ipc true 2>/dev/null; then
    UNSHARE=1
else
    UNSHARE=0
    note "unshare --uts --ipc is not available: the nodes share one hostname"
fi

# ---- topology ----
setup() {
    local ns
    for ns in "$NS1" "$NS2" "$NS3" "$SW"; do
        ip netns add "$ns" || return 1
        ip -n "$ns" link set lo up || return 1
    done
    ip -n "$SW" link add br0 type bridge || return 1
    ip -n "$SW" addr add 10.77.1.254/24 dev br0 || return 1
    ip -n "$SW" link set br0 up || return 1
    ip netns exec "$SW" sysctl -qw net.ipv4.ip_forward=1 || return 1
    # answer every packet for the decoy network with ICMP at once (no per-host rate limit)
    ip netns exec "$SW" sysctl -qw net.ipv4.icmp_ratelimit=0 || return 1
    # node3's decoy first: 10.77.9.3 on eth0, a veth whose other end stays on node3
    ip -n "$NS3" link add eth0 type veth peer name eth0peer || return 1
    ip -n "$NS3" addr add 10.77.9.3/24 dev eth0 || return 1
    ip -n "$NS3" link set eth0peer up || return 1
    ip -n "$NS3" link set eth0 up || return 1
    # the real network: one veth per node into the bridge
    attach "$NS1" bond0 10.77.1.1 p1 || return 1
    attach "$NS2" eth1 10.77.1.2 p2 || return 1
    attach "$NS3" ens5 10.77.1.3 p3 || return 1
    # node3's routed interface (case r): ib7 10.77.5.3/24, routed by the switch namespace to
    # 10.77.1.0/24 (replies to it leave by ens5: loose reverse-path filtering)
    ip -n "$NS3" link add ib7 type veth peer name r3 netns "$SW" || return 1
    ip -n "$SW" addr add 10.77.5.254/24 dev r3 || return 1
    ip -n "$SW" link set r3 up || return 1
    ip -n "$NS3" addr add 10.77.5.3/24 dev ib7 || return 1
    ip -n "$NS3" link set ib7 up || return 1
    ip netns exec "$NS3" sysctl -qw net.ipv4.conf.all.rp_filter=2 || return 1
    ip netns exec "$NS3" sysctl -qw net.ipv4.conf.ib7.rp_filter=2 || return 1
}
attach() { # ns ifname addr bridge-port
    ip link add "$2" netns "$1" type veth peer name "$4" netns "$SW" || return 1
    ip -n "$SW" link set "$4" master br0 || return 1
    ip -n "$SW" link set "$4" up || return 1
    ip -n "$1" addr add "$3/24" dev "$2" || return 1
    ip -n "$1" link set "$2" up || return 1
    ip -n "$1" route add default via 10.77.1.254 || return 1
}
if ! setup >"$WORK/setup.log" 2>&1; then
    cat "$WORK/setup.log"
    skip "could not build the namespace topology (veth/bridge support?)"
fi
note "node1: bond0 10.77.1.1 | node2: eth1 10.77.1.2 | node3: eth0 10.77.9.3 (decoy), ens5 10.77.1.3, ib7 10.77.5.3 (routed)"

NODE_NS=("$NS1" "$NS2" "$NS3")
CASES=" ${NETNS_CASES:-a0 a a2 a3 r b c d e f g h u} " # a subset can be chosen for debugging
# (NETNS_KEEP=1 keeps every rank's output)
want_case() { case "$CASES" in *" $1 "*) return 0 ;; esac; return 1; }

# run_on <node index 0..2> <command...>: inside the node's namespaces, in the background
run_on() {
    local i=$1
    shift
    if [ "$UNSHARE" = 1 ]; then
        # shellcheck disable=SC2016 # $0 and $@ belong to the inner shell
        ip netns exec "${NODE_NS[$i]}" unshare --uts --ipc sh -c 'hostname "$0" && exec "$@"' \
            "node$((i + 1))" "$@" &
    else
        ip netns exec "${NODE_NS[$i]}" "$@" &
    fi
    PIDS+=($!)
}

# start_root <name> <ifname spec> <bootstrap timeout>: root on node3; sets ID
start_root() {
    local out="$WORK/$1.root"
    ID=""
    run_on 2 env COLL_BOOTSTRAP_TIMEOUT="$3" "$ROOTPROG" "$2" 60 >"$out" 2>&1
    local k
    for ((k = 0; k < 100; k++)); do
        ID=$(sed -n 's/^ID //p' "$out")
        [ -n "$ID" ] && return 0
        grep -q '^ERROR' "$out" && break
        sleep 0.1
    done
    bad "$1: the root did not start: $(cat "$out")"
    return 1
}

# start_ranks <name> <pin> <COLL_TIMEOUT> <bootstrap timeout> <iterations> <count>
start_ranks() {
    local r
    RANK_PIDS=()
    for r in 0 1 2; do
        run_on "$r" env COLL_UNIQUE_ID="$ID" COLL_RANK=$r COLL_NRANKS=3 COLL_SOCKET_IFNAME="$2" \
            COLL_TIMEOUT="$3" COLL_BOOTSTRAP_TIMEOUT="$4" COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=INIT \
            "$RANKPROG" "$5" "$6" >"$WORK/$1.r$r" 2>&1
        RANK_PIDS+=($!)
    done
}

# wait_ranks <name> <seconds>: every rank must exit in time (a hang is a failure)
wait_ranks() {
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
        sleep 0.1
    done
    wait "${RANK_PIDS[@]}" 2>/dev/null
    for r in 0 1 2; do
        sed "s/^/  [$1 r$r] /" "$WORK/$1.r$r" | grep -Ev '^  \[[^]]*\] (ITER|INIT rank=)' | grep -v 'INFO INIT' |
            cut -c1-700
    done
}

# field <name> <rank> <field>: from the rank's DIAG-RESULT line
field() {
    local line
    line=$(grep -m1 '^DIAG-RESULT ' "$WORK/$1.r$2")
    case "$3" in
    msg) echo "${line#*msg=}" ;;
    *) echo "$line" | sed -n "s/.* $3=\([^ ]*\).*/\1/p" ;;
    esac
}

expect_rc() { # name rank rc...
    local got
    got=$(field "$1" "$2" rc)
    local want
    for want in "${@:3}"; do
        [ "$got" = "$want" ] && {
            ok
            return 0
        }
    done
    bad "$1: rank $2 returned '${got:-nothing}', expected ${*:3}: $(field "$1" "$2" msg)"
    return 1
}
expect_msg() { # name rank text
    if field "$1" "$2" msg | grep -qF -- "$3"; then
        ok
    else
        bad "$1: rank $2: message lacks \"$3\": $(field "$1" "$2" msg)"
    fi
}
expect_within() { # name rank t0 seconds
    local t
    t=$(field "$1" "$2" t)
    if [ -n "$t" ] && awk -v t="$t" -v t0="$3" -v lim="$4" 'BEGIN { exit !(t - t0 <= lim) }'; then
        ok
    else
        bad "$1: rank $2 failed at ${t:-never}, more than $4 s after $3"
    fi
    [ -n "$t" ] && note "$1: rank $2 failed $(awk -v t="$t" -v t0="$3" 'BEGIN { printf "%.1f", t - t0 }') s after the event"
}
now() { "$RANKPROG" --now; }

# expect_job <name>: every rank finished its all_reduces with exact results
expect_job() {
    for r in 0 1 2; do
        expect_rc "$1" $r COLL_SUCCESS
        if [ "$(field "$1" $r iters)" = 3 ] && [ "$(field "$1" $r bad)" = 0 ]; then
            ok
        else
            bad "$1: rank $r: iterations $(field "$1" $r iters), wrong elements $(field "$1" $r bad)"
        fi
    done
}

# expect_decoy <name> <why>: rank 2 on the decoy is found by the bootstrap root before any data
# connection: every rank, rank 2 included, fails within seconds with one message that names
# the rank, its host, interface, address and network, the job's network and the CIDR fix
expect_decoy() {
    if grep -q "rank 2 of 3: 10.77.9.3:[0-9]* on eth0" "$WORK/$1.r2"; then ok; else
        bad "$1: rank 2 did not choose the decoy eth0 10.77.9.3"
    fi
    for r in 0 1 2; do
        expect_rc "$1" $r COLL_ERR_NETWORK
        if [ "$(field "$1" $r call)" = init ]; then ok; else
            bad "$1: rank $r failed in $(field "$1" $r call), not at init"
        fi
        expect_msg "$1" $r "rank 2 (pid "
        expect_msg "$1" $r " on node3) cannot be reached by the other ranks: its data address 10.77.9.3:"
        expect_msg "$1" $r " on eth0 (network 10.77.9.0/24, chosen by an interface-name pin)"
        expect_msg "$1" $r "The bootstrap root (10.77.1.3) and 2 of 3 ranks are on 10.77.1.0/24."
        expect_msg "$1" $r "COLL_SOCKET_IFNAME=10.77.1.0/24"
        expect_msg "$1" $r "$2"
        expect_within "$1" $r "$t0" 8
    done
    if grep -q "WARN NET dropped connection" "$WORK/$1.r0" "$WORK/$1.r1" "$WORK/$1.r2"; then
        bad "$1: a rank warned about a dropped connection"
    else
        ok
    fi
}

# ---- a0: the root itself pinned onto the decoy ----
name=a0
note "--- a0: root and ranks pinned with COLL_SOCKET_IFNAME=bond,eth (root lands on the decoy)"
if want_case $name && start_root $name "bond,eth" 3; then
    case "$ID" in kcoll1:10.77.9.3:*) ok ;; *) bad "a0: the root is not on the decoy: $ID" ;; esac
    t0=$(now)
    start_ranks $name "bond,eth" 10 3 1 65536
    wait_ranks $name 30
    for r in 0 1; do
        expect_rc $name $r COLL_ERR_TIMEOUT
        expect_msg $name $r "rank $r cannot reach the bootstrap root at 10.77.9.3:"
        expect_msg $name $r "(COLL_SOCKET_IFNAME)"
        expect_within $name $r "$t0" 12
    done
    expect_rc $name 2 COLL_ERR_TIMEOUT
    expect_msg $name 2 "bootstrap timeout: 1 of 3 ranks checked in; missing: rank 0, rank 1."
    expect_within $name 2 "$t0" 7
fi

# ---- a: the ranks pinned onto the decoy, the root reachable ----
name=a
note "--- a: ranks pinned with COLL_SOCKET_IFNAME=bond,eth (node3 picks the decoy), root by CIDR"
if want_case $name && start_root $name "10.77.1.0/24" 20; then
    t0=$(now)
    start_ranks $name "bond,eth" 5 20 3 65536
    wait_ranks $name 40
    expect_decoy $name "Network is unreachable"
fi

# ---- a2: as a, but node1 (the prober) has no default route: its connect fails at once ----
name=a2
note "--- a2: as a, without a default route on node1 (the probe's connect() itself fails)"
if want_case $name && start_root $name "10.77.1.0/24" 20; then
    ip -n "$NS1" route del default
    t0=$(now)
    start_ranks $name "bond,eth" 5 20 3 65536
    wait_ranks $name 40
    ip -n "$NS1" route add default via 10.77.1.254
    expect_decoy $name "Network is unreachable"
fi

# ---- a3: as a, but the switch drops the decoy's packets silently: the probe times out ----
name=a3
note "--- a3: as a, the switch blackholes 10.77.9.0/24 (no ICMP): the probe's 3 s deadline"
if want_case $name && start_root $name "10.77.1.0/24" 20; then
    ip -n "$SW" route add blackhole 10.77.9.0/24
    t0=$(now)
    start_ranks $name "bond,eth" 5 20 3 65536
    wait_ranks $name 40
    ip -n "$SW" route del blackhole 10.77.9.0/24
    expect_decoy $name "no answer within 3 s"
fi

# ---- r: a routed fabric: node3 on its own subnet, pinned by name, routed to the others ----
name=r
note "--- r: COLL_SOCKET_IFNAME=bond0,eth1,ib7: node3 on 10.77.5.0/24, routed to 10.77.1.0/24"
if want_case $name && start_root $name "10.77.1.0/24" 20; then
    t0=$(now)
    start_ranks $name "bond0,eth1,ib7" 10 20 3 65536
    wait_ranks $name 40
    expect_job $name
    note "r: the last rank's communicator was ready $(for r in 0 1 2; do sed -n 's/^INIT rank=[0-9]* t=//p' "$WORK/$name.r$r"; done | sort -n | tail -n 1 | awk -v t0="$t0" '{ printf "%.2f", $1 - t0 }') s after the start (probes included)"
    if grep -q "rank 2 of 3: 10.77.5.3:[0-9]* on ib7" "$WORK/$name.r2"; then ok; else
        bad "r: rank 2 did not use ib7 10.77.5.3"
    fi
    # two networks: the root had a rank of 10.77.1.0/24 probe rank 2's address first
    if grep -q "asked whether rank 2 at 10.77.5.3:[0-9]* is reachable: yes" "$WORK/$name.r0" \
        "$WORK/$name.r1"; then ok; else
        bad "r: no rank probed rank 2's routed address at bootstrap"
    fi
    if grep -q "WARN" "$WORK/$name.r2"; then
        bad "r: rank 2 logged a WARN (the probe connection must be quiet)"
    else
        ok
    fi
fi

# ---- b: the fix, one network by CIDR, three interface names ----
name=b
note "--- b: COLL_SOCKET_IFNAME=10.77.1.0/24 on the root and every rank"
if want_case $name && start_root $name "10.77.1.0/24" 20; then
    t0=$(now)
    start_ranks $name "10.77.1.0/24" 10 20 5 65536
    wait_ranks $name 40
    note "b: the last rank's communicator was ready $(for r in 0 1 2; do sed -n 's/^INIT rank=[0-9]* t=//p' "$WORK/$name.r$r"; done | sort -n | tail -n 1 | awk -v t0="$t0" '{ printf "%.2f", $1 - t0 }') s after the start (one network: no probe)"
    ifs=(bond0 eth1 ens5)
    for r in 0 1 2; do
        expect_rc $name $r COLL_SUCCESS
        if [ "$(field $name $r iters)" = 5 ] && [ "$(field $name $r bad)" = 0 ]; then
            ok
        else
            bad "b: rank $r: iterations $(field $name $r iters), wrong elements $(field $name $r bad)"
        fi
        if grep -q "rank $r of 3: 10.77.1.$((r + 1)):[0-9]* on ${ifs[$r]}," "$WORK/$name.r$r"; then
            ok
        else
            bad "b: rank $r did not log that it uses ${ifs[$r]} 10.77.1.$((r + 1))"
        fi
    done
fi

# ---- d: nothing set on the ranks: the interface on the root's network wins ----
name=d
note "--- d: COLL_SOCKET_IFNAME unset on every rank (node3's first interface is the decoy eth0)"
if want_case $name && start_root $name "10.77.1.0/24" 20; then
    start_ranks $name "" 10 20 3 65536
    wait_ranks $name 40
    expect_job $name
    if grep -q "rank 2 of 3: 10.77.1.3:[0-9]* on ens5" "$WORK/$name.r2" &&
        grep -q "COLL_SOCKET_IFNAME is not set: ens5 .* the interface on the network of the bootstrap root 10.77.1.3" "$WORK/$name.r2"; then
        ok
    else
        bad "d: rank 2 did not take ens5 (on the root's network) over the decoy eth0"
    fi
fi

# ---- e: no route to the root: seconds, not the bootstrap timeout ----
name=e
note "--- e: the root on the decoy, ranks unpinned, COLL_BOOTSTRAP_TIMEOUT=60 on the ranks"
if want_case $name && start_root $name "bond,eth" 16; then
    t0=$(now)
    start_ranks $name "" 10 60 1 65536
    wait_ranks $name 40
    for r in 0 1; do
        expect_rc $name $r COLL_ERR_NETWORK
        expect_msg $name $r "rank $r cannot reach the bootstrap root at 10.77.9.3:"
        expect_msg $name $r "from its address 10.77.1.$((r + 1))"
        expect_msg $name $r "COLL_SOCKET_IFNAME=<a CIDR"
        expect_within $name $r "$t0" 14
    done
    expect_msg $name 0 "for 10 s"
fi

# ---- f: a multi-host coll-run, one command per host, nothing set ----
name=f
note "--- f: coll-run --nnodes 3 on node1, then the printed command on node2 and node3"
if want_case $name && [ -x "$COLLRUN" ]; then
    run_on 0 env -u COLL_SOCKET_IFNAME COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=INIT "$COLLRUN" \
        --nnodes 3 --node-rank 0 -n 1 --timeout 60 "$RANKPROG" 3 65536 >"$WORK/f.n0" 2>&1
    F_PIDS=($!)
    join=""
    for ((k = 0; k < 100; k++)); do
        join=$(sed -n 's/^coll-run:   \(coll-run --nnodes 3 --node-rank K .*\)$/\1/p' "$WORK/f.n0")
        [ -n "$join" ] && break
        sleep 0.1
    done
    if [ -z "$join" ]; then
        bad "f: node 0's coll-run printed no command for the other nodes: $(cat "$WORK/f.n0")"
    else
        ok
        note "f: node 0 printed: ${join:0:60}..."
        for n in 1 2; do
            # the printed command, with K and the program's path as this script has them
            read -r -a words <<<"${join/--node-rank K/--node-rank $n}"
            run_on "$n" env -u COLL_SOCKET_IFNAME COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=INIT \
                "$COLLRUN" "${words[@]:1}" >"$WORK/f.n$n" 2>&1
            F_PIDS+=($!)
        done
    fi
    end=$((SECONDS + 60))
    for p in "${F_PIDS[@]}"; do
        while kill -0 "$p" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
    done
    wait "${F_PIDS[@]}" 2>/dev/null
    for n in 0 1 2; do
        if grep -q "^\[rank $n\] DIAG-RESULT rank=$n call=all_reduce rc=COLL_SUCCESS .* iters=3 bad=0" "$WORK/f.n$n"; then
            ok
        else
            bad "f: node $n: rank $n did not finish its all_reduces: $(grep -v 'INFO INIT\|ITER' "$WORK/f.n$n" | tail -n 5)"
        fi
    done
    if grep -q "COLL_SOCKET_IFNAME is not set: ens5" "$WORK/f.n2"; then ok; else
        bad "f: node3's rank did not take ens5, the interface on the root's network"
    fi
fi

# ---- g: NCCL habits and a typo on one node ----
name=g
note "--- g: NCCL_SOCKET_IFNAME=ens5 and the typo COLL_SOCKET_IFNAM=ens5 on node3 only"
if want_case $name && start_root $name "10.77.1.0/24" 20; then
    RANK_PIDS=()
    for r in 0 1 2; do
        extra=()
        [ $r = 2 ] && extra=(NCCL_SOCKET_IFNAME=ens5 COLL_SOCKET_IFNAM=ens5)
        run_on "$r" env -u COLL_SOCKET_IFNAME COLL_UNIQUE_ID="$ID" COLL_RANK=$r COLL_NRANKS=3 \
            COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=INIT,CONFIG "${extra[@]}" "$RANKPROG" 3 65536 \
            >"$WORK/$name.r$r" 2>&1
        RANK_PIDS+=($!)
    done
    wait_ranks $name 40
    expect_job $name
    if grep -q "NCCL_SOCKET_IFNAME=ens5 is honoured as COLL_SOCKET_IFNAME=ens5" "$WORK/$name.r2" &&
        grep -q "rank 2 of 3: 10.77.1.3:[0-9]* on ens5" "$WORK/$name.r2"; then ok; else
        bad "g: node3 did not say it honours NCCL_SOCKET_IFNAME=ens5, or did not use it"
    fi
    if grep -q "WARN CONFIG.*COLL_SOCKET_IFNAM.*COLL_SOCKET_IFNAME" "$WORK/$name.r2"; then ok; else
        bad "g: no WARN for the typo COLL_SOCKET_IFNAM naming COLL_SOCKET_IFNAME"
    fi
fi

# ---- h: torchrun's variables across the three nodes ----
name=h
note "--- h: MASTER_ADDR=10.77.1.1 MASTER_PORT RANK WORLD_SIZE COLL_JOB_SECRET, nothing else"
if want_case $name; then
    RANK_PIDS=()
    port=$((20000 + RANDOM % 20000))
    for r in 0 1 2; do
        run_on "$r" env -u COLL_SOCKET_IFNAME -u COLL_UNIQUE_ID MASTER_ADDR=10.77.1.1 \
            MASTER_PORT=$port RANK=$r WORLD_SIZE=3 COLL_JOB_SECRET=0123456789abcdef0123456789abcdef \
            COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=INIT "$RANKPROG" 3 65536 >"$WORK/$name.r$r" 2>&1
        RANK_PIDS+=($!)
    done
    wait_ranks $name 40
    expect_job $name
    if grep -q "this rank hosts the bootstrap root" "$WORK/$name.r0" &&
        grep -q "rank 2 of 3: 10.77.1.3:[0-9]* on ens5" "$WORK/$name.r2"; then ok; else
        bad "h: rank 0 did not host the root, or node3 did not take ens5 toward MASTER_ADDR"
    fi
fi

# ---- u: 32 ranks, an all_to_all, one host under ulimit -n 64 ----
name=u
note "--- u: 32 ranks over the three nodes (11/11/10), all_to_all, node2's ranks under ulimit -n 64"
if want_case $name && start_root $name "10.77.1.0/24" 30; then
    t0=$(now)
    RANK_PIDS=()
    first=(0 11 22)
    last=(10 21 31)
    for n in 0 1 2; do
        lim=unlimited
        [ $n = 1 ] && lim=64
        # one shell per node (one IPC namespace: its ranks share memory, as on a real host)
        # shellcheck disable=SC2016 # expanded by the node's shell
        run_on "$n" env COLL_UNIQUE_ID="$ID" COLL_NRANKS=32 COLL_SOCKET_IFNAME=10.77.1.0/24 \
            COLL_TIMEOUT=10 COLL_BOOTSTRAP_TIMEOUT=30 LIM=$lim FIRST="${first[$n]}" \
            LAST="${last[$n]}" PROG="$RANKPROG" OUT="$WORK/$name" sh -c '
                [ "$LIM" = unlimited ] || ulimit -n "$LIM" || exit 9
                r=$FIRST
                while [ "$r" -le "$LAST" ]; do
                    COLL_RANK=$r "$PROG" 2 256 all_to_all >"$OUT.r$r" 2>&1 &
                    r=$((r + 1))
                done
                wait'
        RANK_PIDS+=($!)
    done
    wait_ranks $name 40
    nlim=0 nother=0
    for ((r = 0; r < 32; r++)); do
        if [ "$r" -ge 11 ] && [ "$r" -le 21 ]; then
            # a limited rank: out of descriptors itself, or told by another limited rank
            rc=$(field $name $r rc)
            case "$rc" in COLL_ERR_SYSTEM | COLL_ERR_REMOTE) ok ;; *)
                bad "u: rank $r (limited) returned '${rc:-nothing}': $(field $name $r msg)" ;;
            esac
            [ "$rc" = COLL_ERR_SYSTEM ] && nlim=$((nlim + 1))
        else
            expect_rc $name $r COLL_ERR_REMOTE
            nother=$((nother + 1))
        fi
        expect_msg $name $r "Too many open files"
        # the limit, said of the rank of node2 that ran out, in peers, with the fix
        if field $name $r msg |
            grep -Eq "the open-file limit \(ulimit -n\) is 64 \(hard 64\), but rank (1[1-9]|2[01]) with"; then
            ok
        else
            bad "u: rank $r does not name the limit 64 of a rank of node2: $(field $name $r msg)"
        fi
        expect_msg $name $r " with 31 peers ("
        expect_msg $name $r "descriptors: raise it (ulimit -n "
        t=$(field $name $r t)
        if [ -n "$t" ] && awk -v t="$t" -v t0="$t0" 'BEGIN { exit !(t - t0 <= 25) }'; then ok; else
            bad "u: rank $r failed at ${t:-never}, more than 25 s after the start"
        fi
    done
    # the limited ranks name themselves; the others name a limited rank (11..21) on node2
    if [ "$nlim" -ge 1 ]; then ok; else bad "u: no rank of node2 said it ran out of descriptors"; fi
    if field $name 0 msg | grep -Eq "^rank (1[1-9]|2[01]) \(pid [0-9]+ on node2, 10.77.1.2:[0-9]+\) reported: "; then
        ok
    else
        bad "u: rank 0 does not name a rank of node2: $(field $name 0 msg)"
    fi
    slowest=$(for ((r = 0; r < 32; r++)); do field $name $r t; done | sort -n | tail -n 1)
    note "u: $nlim limited ranks named their own limit; the last of 32 ranks failed $(awk -v t="$slowest" -v t0="$t0" 'BEGIN { printf "%.1f", t - t0 }') s after the start"
fi

# ---- c: a link goes down mid-collective ----
name=c
note "--- c: node2's eth1 goes down during a loop of 4 MiB all_reduces (COLL_TIMEOUT=4)"
if want_case $name && start_root $name "10.77.1.0/24" 20; then
    start_ranks $name "10.77.1.0/24" 4 20 0 1048576
    end=$((SECONDS + 40))
    while [ "$SECONDS" -lt "$end" ]; do
        n=0
        for r in 0 1 2; do
            [ "$(grep -c '^ITER' "$WORK/$name.r$r")" -ge 3 ] && n=$((n + 1))
        done
        [ "$n" -eq 3 ] && break
        grep -q '^DIAG-RESULT' "$WORK/$name.r0" && break
        sleep 0.05
    done
    if [ "$n" -eq 3 ]; then
        ok
        ip -n "$NS2" link set eth1 down
        t0=$(now)
        note "c: eth1 of node2 is down"
        wait_ranks $name 40
        for r in 0 2; do
            expect_rc $name $r COLL_ERR_TIMEOUT COLL_ERR_REMOTE
            expect_msg $name $r "rank 1 (pid "
            expect_msg $name $r "on node"
            expect_within $name $r "$t0" 8
            if [ "$(field $name $r bad)" = 0 ]; then ok; else bad "c: rank $r: wrong results"; fi
        done
        # rank 1 itself must not hang either, and it says its own link is down, not its peers
        expect_rc $name 1 COLL_ERR_NETWORK
        expect_msg $name 1 "this rank's link eth1 is down"
        expect_within $name 1 "$t0" 8
        # while the ranks wait, a line names whom they wait on (every third of COLL_TIMEOUT)
        if grep -q "has made no progress for [0-9]* s" "$WORK/$name.r0" "$WORK/$name.r2"; then
            ok
        else
            bad "c: no rank said whom it waits on while it waited"
        fi
    else
        bad "c: the ranks did not complete 3 all_reduces before the link went down"
        wait_ranks $name 1
    fi
fi

finish
