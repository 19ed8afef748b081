#!/usr/bin/env bash
# Runs inside a soft-RoCE guest (ib_rxe_test.sh writes the guest's /run/kcoll/guest.sh to call
# it): makes the rxe device, then runs one group of cases against the real verbs stack and
# prints "N passed, M failed" (exit 0 only when nothing failed).
#   guest-cases.sh <group> <build-dir>
# groups (COLL_TRANSPORT=RequireIB unless said otherwise; COLL_TEST_HOST_ID_SUFFIX makes the
# ranks of one guest different "hosts" where InfiniBand must carry every pair):
#   loopback  one guest, one rxe device on a dummy interface, RoCE loopback: the devices and
#             ports as verbs sees them; the transport's unit test (test_ib: the real library
#             with a device); mp_p2p over 2 ranks; every collective x datatype x op x
#             count (to 1 Mi + 3 elements) over 2 ranks; the same without the large count over 4
#             ranks; shared memory and InfiniBand in one op (hosts a,b,a,b, 1 QP per peer); no
#             spinning (every wait sleeps on the completion channel)
#   node0, node1  two guests joined by qemu's UDP socket netdev, rxe on eth0, 2 ranks each
#             (shared memory inside a guest, RoCE between): coll-perf over coll-run --nnodes 2,
#             every collective x datatype (64 B to 4 KiB) and x op (float32, 1 MiB), each
#             result checked exactly; node 0 hands the unique id to node 1 through the job
#             directory
#   faults    rank killed mid-transfer; a QP forced into the error state; registration above
#             the locked-memory limit; COLL_IB_HCA / NCCL_IB_HCA pins; RoCE v2 GID selection and
#             a GID type mismatch between two ranks
#   smoke     the short case of the sanitizer build: mp_p2p over 2 ranks
set -u
GROUP=${1:?usage: guest-cases.sh <group> <build-dir>}
B=${2:?usage: guest-cases.sh <group> <build-dir>}
JOB=/run/kcoll
NAME=${KCOLL_GUEST_NAME:-guest}
pass=0
fail=0
note() { echo "[ib-rxe $NAME] $*"; }
ok() {
    pass=$((pass + 1))
    note "ok: $*"
}
bad() {
    fail=$((fail + 1))
    note "FAIL: $*"
}
finish() {
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}

# ---- the device ----
if [ -n "${KCOLL_GUEST_IP:-}" ] && ip link show eth0 >/dev/null 2>&1; then
    DEV=eth0
else
    DEV=d0
    ip link add d0 type dummy || bad "ip link add d0 type dummy"
fi
IPADDR=${KCOLL_GUEST_IP:-10.77.0.1/24}
ip addr add "$IPADDR" dev "$DEV" && ip link set "$DEV" up || bad "configuring $DEV"
rdma link add rxe0 type rxe netdev "$DEV" || bad "rdma link add rxe0 type rxe netdev $DEV"
for ((k = 0; k < 100; k++)); do
    ibv_devinfo -d rxe0 2>/dev/null | grep -q PORT_ACTIVE && break
    sleep 0.2
done
if ibv_devinfo -d rxe0 2>/dev/null | grep -q PORT_ACTIVE; then
    ok "rxe0 on $DEV ($IPADDR): port 1 ACTIVE"
else
    bad "rxe0 has no active port: $(ibv_devinfo 2>&1 | tr '\n' ' ')"
    finish
    exit
fi
ulimit -l unlimited
cd /tmp || exit 1
# COLL_IB_TIMEOUT=16 (268 ms): the qemu socket link drops packets under load, and at the default
# (20: 4.3 s per retransmission, for lossless fabrics) every loss stalls a transfer for seconds;
# 14 (67 ms, 7 retries: 0.5 s in all) failed a QP with retry-exceeded when the loaded host
# stalled a guest for longer
export COLL_SOCKET_IFNAME=$DEV COLL_TIMEOUT=60 COLL_BOOTSTRAP_TIMEOUT=60 COLL_TRANSPORT=RequireIB COLL_IB_TIMEOUT=16
export MP_DEADLINE=280

# run <name> <timeout s> <cmd...>: passes when the command exits 0 (coll-perf exits 1 on a wrong
# value) and no "N passed, M failed" summary of a test program counts a failure.
run() {
    local name=$1 tmo=$2 start=$SECONDS rc=0
    local out="$JOB/$NAME-$name.out"
    shift 2
    timeout -k 5 "$tmo" "$@" >"$out" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ] && ! grep -qE '^[0-9]+ passed, [1-9][0-9]* failed$' "$out"; then
        ok "$name ($((SECONDS - start)) s): $(grep -E 'passed|cases' "$out" | tail -1)"
    else
        bad "$name: exit $rc after $((SECONDS - start)) s; last lines:"
        tail -25 "$out"
    fi
}

# expect_fail <name> <timeout s> <want-regex> <cmd...>: the command must fail (exit != 0)
# within the timeout, and its output must match want (a clear error, not a hang).
expect_fail() {
    local name=$1 tmo=$2 want=$3 start=$SECONDS rc=0
    local out="$JOB/$NAME-$name.out"
    shift 3
    timeout -k 5 "$tmo" "$@" >"$out" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && grep -qE "$want" "$out"; then
        ok "$name ($((SECONDS - start)) s): $(grep -oE "$want" "$out" | head -1 | cut -c1-160)"
    else
        bad "$name: exit $rc after $((SECONDS - start)) s, expected a failure matching /$want/; last lines:"
        tail -25 "$out"
    fi
}

PERF="$B/tools/coll-perf"
RUN="$B/tools/coll-run"

# coll-run over the two guests: node0 starts it and publishes the id; node1 joins with it
pair() {
    local tag=$1 tmo=$2 rc=0 start=$SECONDS id=""
    local idf="$JOB/$tag.id" out="$JOB/$NAME-$tag.out"
    shift 2
    if [ "$NAME" = node0 ]; then
        rm -f "$idf"
        timeout -k 5 "$tmo" "$RUN" --nnodes 2 --node-rank 0 -n 2 --ifname eth0 --timeout "$tmo" \
            "$@" >"$out" 2>&1 &
        local pid=$!
        for ((k = 0; k < 300; k++)); do
            id=$(sed -n 's/^coll-run:   coll-run --nnodes 2 --node-rank K .*--id \([^ ]*\).*$/\1/p' "$out")
            [ -n "$id" ] && break
            sleep 0.2
        done
        [ -n "$id" ] && echo "$id" >"$idf.tmp" && mv "$idf.tmp" "$idf"
        wait "$pid" || rc=$?
    else
        for ((k = 0; k < 600; k++)); do
            [ -s "$idf" ] && break
            sleep 0.2
        done
        id=$(cat "$idf" 2>/dev/null)
        [ -n "$id" ] || {
            bad "$tag: node0 published no unique id"
            return
        }
        timeout -k 5 "$tmo" "$RUN" --nnodes 2 --node-rank 1 -n 2 --ifname eth0 --timeout "$tmo" \
            --id "$id" "$@" >"$out" 2>&1 || rc=$?
    fi
    # every row checked (coll-perf exits 1 on a wrong value), and RoCE carried the cross pairs
    if [ "$rc" -eq 0 ] && { [ "$NAME" != node0 ] || grep -q 'Out of bounds values : 0 OK' "$out"; } &&
        grep -qE 'rank [0-9]+: [0-9]+ peers? over shared memory, [1-9][0-9]* over InfiniBand, 0 over sockets' "$out"; then
        local rows="ranks 2 and 3 joined"
        [ "$NAME" = node0 ] && rows="$(grep -cE '^\[rank 0\] +[0-9]+ +[0-9]+ ' "$out") checked rows"
        ok "$tag ($((SECONDS - start)) s): $rows"
    else
        bad "$tag: exit $rc after $((SECONDS - start)) s; last lines:"
        tail -25 "$out"
    fi
}

case "$GROUP" in
loopback)
    ibv_devinfo -v -d rxe0 | grep -E 'max_qp_wr|max_cqe|max_mr_size|active_mtu|link_layer|GID' | head -12
    run test_ib 60 env -u COLL_IB_TIMEOUT -u COLL_TRANSPORT "$B/tests/unit/test_ib"
    run p2p_2 120 env COLL_TEST_HOST_ID_SUFFIX=a,b "$B/tests/mp/mp_p2p" 2
    run conf_all_2 300 env COLL_TEST_HOST_ID_SUFFIX=a,b "$B/tests/mp/mp_conformance" all 2
    run conf_all_4 300 env COLL_TEST_HOST_ID_SUFFIX=a,b,c,d "$B/tests/mp/mp_conformance" all 4 0
    run mixed_all_reduce_4 200 env COLL_TEST_HOST_ID_SUFFIX=a,b,a,b COLL_IB_NQPS=1 \
        "$B/tests/mp/mp_conformance" all_reduce 4
    run nospin_all_reduce_2 200 env COLL_TEST_HOST_ID_SUFFIX=a,b COLL_SPIN_US=0 \
        COLL_CHUNK_SIZE=200K "$B/tests/mp/mp_conformance" all_reduce 2
    ;;
node0 | node1)
    export COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=INIT,IB
    pair perf_dtypes 240 "$PERF" -C all -d all -o sum -b 64 -e 4K -f 8 -w 1 -n 2
    pair perf_ops 240 "$PERF" -C all -d float32 -o all -b 1M -e 1M -w 1 -n 2
    # Debian's kernel copies DMA-pinned pages at fork: rdma-core's ibv_is_fork_initialized says
    # so, and kcoll logs it instead of calling ibv_fork_init (ib.c's fork_protect)
    f="$JOB/$NAME-perf_dtypes.out"
    if [ "$(grep -c "this kernel copies registered memory at fork" "$f")" -ge 2 ]; then
        ok "fork safety: both ranks read rdma-core's answer (the kernel copies pinned pages)"
    else
        bad "fork safety: expected a 'copies registered memory at fork' line per rank in $f: $(grep -i fork "$f" | head -3)"
    fi
    ;;
smoke)
    run p2p_2 200 env COLL_TEST_HOST_ID_SUFFIX=a,b "$B/tests/mp/mp_p2p" 2
    ;;
faults)
    . "$(dirname "${BASH_SOURCE[0]}")/guest-faults.sh"
    ;;
*)
    bad "unknown group $GROUP"
    ;;
esac
finish
