#!/usr/bin/env bash
# kcoll's InfiniBand transport on a real verbs stack: the Linux soft-RoCE driver (rdma_rxe) in
# qemu guests under TCG, with rdma-core 44 (libibverbs, the rxe provider) as user space.
#   ib_rxe_test.sh <loopback|two|faults|smoke> <build-dir>
#     loopback  one guest, RoCE loopback on one rxe device (2 and 4 ranks)
#     two       two guests joined by qemu's UDP socket netdev, 2 ranks each
#     faults    one guest: the fault cases (guest-faults.sh)
#     smoke     one guest, one short case (the sanitizer build's)
# The guest image (guest-image.sh) is built once and cached in <build-dir>/ib-rxe-image; what
# each group runs inside is in guest-cases.sh. Exit 77 with "SKIPPED: <why>" where qemu, the
# guest kernel package or the rdma-core user space is missing; every guest is killed at its
# deadline (KCOLL_IB_RXE_TIMEOUT, default 540 s).
set -u
GROUP=${1:-}
BUILD=${2:-}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
skip() {
    echo "SKIPPED: $*"
    echo "0 passed, 0 failed"
    exit 77
}
case "$GROUP" in
loopback | two | faults | smoke) ;;
*)
    echo "usage: ib_rxe_test.sh <loopback|two|faults|smoke> <build-dir>" >&2
    exit 2
    ;;
esac
[ -d "$BUILD" ] || {
    echo "ib_rxe_test: no build directory $BUILD" >&2
    exit 2
}
BUILD=$(cd "$BUILD" && pwd)
command -v qemu-system-x86_64 >/dev/null ||
    skip "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86; scripts/setup.sh does)"
for t in ibv_devinfo rdma ib_write_bw; do
    command -v "$t" >/dev/null ||
        skip "$t is not installed: the guest runs this machine's rdma-core user space (scripts/setup.sh installs ibverbs-utils, rdma-core, perftest, iproute2)"
done
[ -e /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ] || ls /usr/lib/*/libibverbs/librxe-* >/dev/null 2>&1 ||
    skip "the rxe verbs provider is not installed (ibverbs-providers; scripts/setup.sh installs it)"
case "$BUILD/" in
/proc/* | /sys/* | /dev/*)
    skip "the build directory $BUILD is under a directory the guest replaces with its own (/proc, /sys, /dev): build elsewhere"
    ;;
/tmp/* | /run/*)
    # the guest mounts fresh /tmp and /run: the tree that holds the build (a fresh clone in /tmp,
    # as CI makes) is shared with it as well, at the same path (vm.sh, guest-init)
    KCOLL_RXE_TREE=$(cut -d/ -f1-3 <<<"$BUILD")
    case "$HERE/" in
    /tmp/* | /run/*)
        case "$HERE/" in "$KCOLL_RXE_TREE"/*) ;; *)
            skip "the sources ($HERE) and the build ($BUILD) are under different directories of /tmp or /run: keep both in one"
            ;;
        esac
        ;;
    esac
    export KCOLL_RXE_TREE
    ;;
esac

img_out=$("$HERE/guest-image.sh" "$BUILD/ib-rxe-image" 2>&1)
case $? in
0) IMG=$(tail -1 <<<"$img_out") ;;
77)
    echo "$img_out"
    echo "0 passed, 0 failed"
    exit 77
    ;;
*)
    echo "ib_rxe_test: building the guest image failed:"
    echo "$img_out"
    exit 1
    ;;
esac

# shellcheck source=tests/ib-rxe/vm.sh
. "$HERE/vm.sh"
mkdir -p "$BUILD/ib-rxe-jobs"
JOB=$(mktemp -d "$BUILD/ib-rxe-jobs/$GROUP.XXXXXX")
TMO=${KCOLL_IB_RXE_TIMEOUT:-540}
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null
    done
    wait 2>/dev/null
}
trap cleanup EXIT

# the guest runs guest-cases.sh with its group (the source and build trees are at the same
# paths in the guest: this machine's root is its root)
cat >"$JOB/guest.sh" <<GUEST
g=\$KCOLL_GUEST_NAME
[ "$GROUP" = two ] || g=$GROUP
exec bash "$HERE/guest-cases.sh" "\$g" "$BUILD"
GUEST

start=$SECONDS
echo "[ib-rxe] $GROUP: guest image $IMG (kernel $(cat "$IMG/kernel.version")), job $JOB"
if [ "$GROUP" = two ]; then
    p0=$((20000 + ($$ % 10000) * 2))
    vm_boot "$IMG" "$JOB" node0 10.77.3.1/24 1536 "$TMO" "$p0" "$((p0 + 1))"
    PIDS+=("$VM_PID")
    vm_boot "$IMG" "$JOB" node1 10.77.3.2/24 1536 "$TMO" "$((p0 + 1))" "$p0"
    PIDS+=("$VM_PID")
    NAMES=(node0 node1)
else
    vm_boot "$IMG" "$JOB" "$GROUP" "" 2048 "$TMO"
    PIDS+=("$VM_PID")
    NAMES=("$GROUP")
fi
rcs=()
for p in "${PIDS[@]}"; do
    rc=0
    wait "$p" || rc=$?
    rcs+=("$rc")
done
PIDS=()

pass=0
fail=0
for i in "${!NAMES[@]}"; do
    n=${NAMES[$i]}
    echo "---- guest $n (qemu exit ${rcs[$i]}) ----"
    cat "$JOB/$n.log" 2>/dev/null
    if [ ! -f "$JOB/$n.rc" ]; then
        echo "[ib-rxe] FAIL: guest $n did not finish (qemu exit ${rcs[$i]}; 124: killed at ${TMO} s); its console:"
        tail -30 "$JOB/$n.console" 2>/dev/null
        tail -5 "$JOB/$n.qemu" 2>/dev/null
        fail=$((fail + 1))
        continue
    fi
    read -r gp gf < <(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$JOB/$n.log" | tail -1)
    pass=$((pass + ${gp:-0}))
    fail=$((fail + ${gf:-1}))
    [ "$(cat "$JOB/$n.rc")" = 0 ] || [ "${gf:-1}" != 0 ] || fail=$((fail + 1))
done
echo "[ib-rxe] $GROUP: $((SECONDS - start)) s"
echo "$pass passed, $fail failed"
if [ "$fail" -eq 0 ]; then
    rm -rf "$JOB"
    exit 0
fi
echo "[ib-rxe] outputs kept in $JOB"
exit 1
