# The "faults" group of guest-cases.sh (sourced there, in the guest: rxe0 on the dummy d0,
# 10.77.0.1; run/expect_fail/ok/bad from guest-cases.sh). Two ranks are two "hosts"
# (COLL_TEST_HOST_ID_SUFFIX=a,b) so that RoCE loopback carries their traffic; a setting for one
# rank only goes through a wrapper that looks at COLL_RANK.
# shellcheck shell=bash

# /tmp/perf2 [VAR=value...]: coll-perf over 2 ranks on two "hosts" (all_reduce, 8 B .. 64 KiB,
# checked) with those variables; RANK1_ENV="VAR=value ..." applies to rank 1 only; IFSPEC is the
# communicator's interface (d0). A script, so that run/expect_fail can put a deadline on it.
cat >/tmp/perf2 <<PERF2
#!/bin/bash
IFSPEC=d0
for a in "\$@"; do
    case "\$a" in IFSPEC=*) IFSPEC=\${a#IFSPEC=} ;; esac
done
exec env COLL_TEST_HOST_ID_SUFFIX=a,b COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=INIT,IB "\$@" "$RUN" -n 2 \\
    --ifname "\$IFSPEC" --timeout 100 /tmp/rank1env "$PERF" -b 8 -e 64K -f 8 -w 1 -n 2
PERF2
cat >/tmp/rank1env <<'RANK1'
#!/bin/bash
if [ "$COLL_RANK" = 1 ] && [ -n "${RANK1_ENV:-}" ]; then
    # shellcheck disable=SC2086
    export $RANK1_ENV
fi
exec "$@"
RANK1
chmod +x /tmp/perf2 /tmp/rank1env
# the INFO line of transport choice must say InfiniBand on both ranks
both_ib() {
    local out="$JOB/$NAME-$1.out"
    if [ "$(grep -cE 'rank [01]: 0 peers over shared memory, 1 over InfiniBand, 0 over sockets' "$out")" = 2 ]; then
        ok "$1: both ranks over InfiniBand"
    else
        bad "$1: not both ranks over InfiniBand: $(grep -E 'peers over' "$out" | tr '\n' ' ')"
    fi
}

# ---- a rank killed mid-transfer; a QP forced into the error state ----
run kill_mixed 200 env COLL_TIMEOUT=20 "$B/tests/shm/test_shm" kill_mixed
run qp_error 200 env COLL_TIMEOUT=20 "$B/tests/shm/test_shm" ib_qp_error

# ---- registration above the locked-memory limit: without CAP_IPC_LOCK and with ulimit -l 256
# (KiB), the rings (about 1 MiB per peer) cannot be registered: a clear error, not a crash ----
expect_fail memlock 120 'locked-memory limit, ulimit -l, is 256 KiB: raise it' \
    setpriv --bounding-set=-ipc_lock --inh-caps=-ipc_lock -- \
    bash -c 'ulimit -l 256 && exec "$@"' _ env COLL_TEST_HOST_ID_SUFFIX=a,b "$RUN" -n 2 \
    --ifname d0 --timeout 100 "$PERF" -b 8 -e 8 -w 1 -n 1

# ---- HCA pins ----
run hca_pin 120 /tmp/perf2 COLL_IB_HCA=rxe0
grep -q 'InfiniBand rxe0:1 (RoCE' "$JOB/$NAME-hca_pin.out" && ok "hca_pin: rxe0:1 chosen" ||
    bad "hca_pin: no 'InfiniBand rxe0:1 (RoCE' line"
run nccl_hca_exact 120 /tmp/perf2 NCCL_IB_HCA==rxe0:1
both_ib nccl_hca_exact
expect_fail hca_nomatch 120 'InfiniBand is not usable here: .*no port matches the HCA list' \
    /tmp/perf2 COLL_IB_HCA=mlx5_0
expect_fail nccl_hca_excluded 120 'InfiniBand is not usable here: .*no port matches the HCA list' \
    /tmp/perf2 NCCL_IB_HCA=^rxe0
expect_fail hca_port2 120 'InfiniBand is not usable here' /tmp/perf2 COLL_IB_HCA=rxe0:2

# ---- RoCE v2 GID selection ----
gids=""
G=/sys/class/infiniband/rxe0/ports/1
for i in $(seq 0 15); do # the table has hundreds of entries; the configured ones come first
    g=""
    read -r g <"$G/gids/$i" 2>/dev/null
    [ -z "$g" ] || [ "$g" = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue
    t=""
    read -r t <"$G/gid_attrs/types/$i" 2>/dev/null
    gids="$gids $i=$g($t)"
done
note "rxe0 GID table:$gids"
run gid_auto 120 /tmp/perf2
sel=$(sed -n 's/.*InfiniBand rxe0:1 (RoCE, MTU [0-9]*, GID index \([0-9]*\) .*/\1/p' "$JOB/$NAME-gid_auto.out" | head -1)
if [ -n "$sel" ] && grep -q 'v2' "$G/gid_attrs/types/$sel" &&
    grep -q '0000:ffff:0a4d:0001$' "$G/gids/$sel"; then
    ok "gid_auto: GID index $sel is RoCE v2 with the IPv4 address"
else
    bad "gid_auto: GID index '$sel' is not the RoCE v2 IPv4 entry ($gids)"
fi
ll=""
for i in 0 1 2 3; do
    grep -qi '^fe80' "$G/gids/$i" 2>/dev/null && ll=$i && break
done
if [ -n "$ll" ]; then
    # one rank on the link-local IPv6 entry, the other on the IPv4 one: named at connection
    # instead of RDMA writes that never arrive
    expect_fail gid_mismatch 120 'is an IPv6 address and this rank.s ::ffff:10.77.0.1 an IPv4 one|is an IPv4 address and this rank.s fe80::[0-9a-f:]* an IPv6 one' \
        /tmp/perf2 RANK1_ENV="COLL_IB_GID_INDEX=$ll"
else
    bad "gid_mismatch: rxe0 has no link-local GID ($gids)"
fi
expect_fail gid_empty 120 'COLL_IB_GID_INDEX=9 names an empty|COLL_IB_GID_INDEX=9 is not in the port' \
    /tmp/perf2 COLL_IB_GID_INDEX=9

# ---- COLL_TRANSPORT=auto ----
run auto_ib 120 /tmp/perf2 COLL_TRANSPORT=auto
both_ib auto_ib
n=$(grep -c 'COLL_TRANSPORT=auto: rank [01] uses InfiniBand between hosts: every rank has an active RDMA port on the pinned network (here rxe0:1, RoCE on d0)' "$JOB/$NAME-auto_ib.out")
[ "$n" = 2 ] && ok "auto_ib: one INFO line per rank says InfiniBand and why" ||
    bad "auto_ib: $n INFO lines saying InfiniBand, expected 2"
# the communicator on lo (the pinned network), where no RDMA port is: sockets, saying why
run auto_other_net 120 /tmp/perf2 IFSPEC=lo COLL_TRANSPORT=auto
n=$(grep -c 'COLL_TRANSPORT=auto: rank [01] offers no InfiniBand (sockets between hosts): RoCE port rxe0:1 has no GID on lo' "$JOB/$NAME-auto_other_net.out")
[ "$n" = 2 ] && grep -q 'rank 0: 0 peers over shared memory, 1 over sockets' "$JOB/$NAME-auto_other_net.out" &&
    ok "auto_other_net: sockets, one INFO line per rank saying why" ||
    bad "auto_other_net: expected sockets and 2 INFO lines naming lo ($n)"
# one rank without a port: every rank uses sockets, rank 0 names rank 1
run auto_one_without 120 /tmp/perf2 RANK1_ENV=COLL_IB_HCA=mlx5_9 COLL_TRANSPORT=auto
o="$JOB/$NAME-auto_one_without.out"
grep -q 'COLL_TRANSPORT=auto: rank 0 uses sockets between hosts: rank 1 has no active RDMA port' "$o" &&
    grep -q 'COLL_TRANSPORT=auto: rank 1 offers no InfiniBand' "$o" &&
    [ "$(grep -cE 'rank [01]: 0 peers over shared memory, 1 over sockets' "$o")" = 2 ] &&
    ok "auto_one_without: sockets on both ranks, each says why" ||
    bad "auto_one_without: $(grep -E 'auto:|peers over' "$o" | tr '\n' ' ')"
