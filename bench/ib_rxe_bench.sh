#!/usr/bin/env bash
# The InfiniBand transport against the socket transport on soft-RoCE (rdma_rxe) between two qemu
# guests under TCG (tests/ib-rxe), beside perftest's ib_write_lat / ib_write_bw on the same link
# (the limit of that verbs stack):
#   bench/ib_rxe_bench.sh <build-dir> [rounds]
# Each guest runs one rank (2 ranks); per round, IB and sockets alternate: coll-perf sendrecv and
# all_reduce at 8 B (latency: time per call) and 16 MiB (bandwidth: algbw), results checked.
# TCG makes every figure 4-20x slower than native and the qemu UDP link drops packets under load
# (COLL_IB_TIMEOUT=16 here: 268 ms per retransmission): compare figures only within one run.
set -euo pipefail
BUILD=$(cd "${1:?usage: ib_rxe_bench.sh <build-dir> [rounds]}" && pwd)
ROUNDS=${2:-2}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMG=$("$ROOT/tests/ib-rxe/guest-image.sh" "$BUILD/ib-rxe-image" | tail -1)
# shellcheck source=tests/ib-rxe/vm.sh
. "$ROOT/tests/ib-rxe/vm.sh"
mkdir -p "$BUILD/ib-rxe-jobs"
JOB=$(mktemp -d "$BUILD/ib-rxe-jobs/bench.XXXXXX")
cat >"$JOB/guest.sh" <<GUEST
set -u
B=$BUILD
ROUNDS=$ROUNDS
GUEST
cat >>"$JOB/guest.sh" <<'GUEST'
J=/run/kcoll
N=$KCOLL_GUEST_NAME
ip addr add "$KCOLL_GUEST_IP" dev eth0 && ip link set eth0 up
rdma link add rxe0 type rxe netdev eth0
for k in $(seq 50); do ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE && break; sleep 0.2; done
ulimit -l unlimited
cd /tmp
PEER=10.77.3.1
# step <tag>: both guests meet at a numbered step (files in the shared job directory)
step() {
    touch "$J/$N.$1"
    local o=node0
    [ "$N" = node0 ] && o=node1
    for k in $(seq 3000); do [ -e "$J/$o.$1" ] && return; sleep 0.1; done
}
perftest() { # <tag> <cmd...>: node0 serves, node1 connects
    step "$1"
    local tag=$1
    shift
    if [ "$N" = node0 ]; then
        timeout 90 "$@" >"$J/perf-$tag.out" 2>&1 || echo "exit $? (124: not done in 90 s)" >>"$J/perf-$tag.out"
    else
        sleep 1
        timeout 90 "$@" "$PEER" >/dev/null 2>&1
    fi
}
kcoll() { # <tag> <transport> <coll-perf args...>
    local tag=$1 tp=$2 id=""
    shift 2
    step "$tag"
    if [ "$N" = node0 ]; then
        rm -f "$J/$tag.id"
        COLL_TRANSPORT=$tp COLL_IB_TIMEOUT=16 timeout 200 "$B/tools/coll-run" --nnodes 2 \
            --node-rank 0 -n 1 --ifname eth0 --timeout 190 "$B/tools/coll-perf" "$@" \
            >"$J/kcoll-$tag.out" 2>&1 &
        for k in $(seq 300); do
            id=$(sed -n 's/^coll-run:   coll-run .*--id \([^ ]*\).*$/\1/p' "$J/kcoll-$tag.out")
            [ -n "$id" ] && break
            sleep 0.1
        done
        echo "$id" >"$J/$tag.id"
        wait
    else
        for k in $(seq 300); do [ -s "$J/$tag.id" ] && break; sleep 0.1; done
        COLL_TRANSPORT=$tp COLL_IB_TIMEOUT=16 timeout 200 "$B/tools/coll-run" --nnodes 2 \
            --node-rank 1 -n 1 --ifname eth0 --timeout 190 --id "$(cat "$J/$tag.id")" \
            "$B/tools/coll-perf" "$@" >/dev/null 2>&1
    fi
}
perftest lat ib_write_lat -d rxe0 -x 1 -s 8 -n 1000 -F
# perftest's write bandwidth with messages of kcoll's slot size (64 KiB), 1 MiB and 16 MiB: on
# a lossy link one lost packet of a large message retransmits the rest of it (go-back-N)
perftest bw64k ib_write_bw -d rxe0 -x 1 -s 65536 -n 200 -F
perftest bw1m ib_write_bw -d rxe0 -x 1 -s 1048576 -n 5 -F
perftest bw16m ib_write_bw -d rxe0 -x 1 -s 16777216 -n 5 -F
for r in $(seq "$ROUNDS"); do
    for tp in RequireIB Socket; do
        for c in sendrecv all_reduce; do
            kcoll "$r-$tp-$c-8" "$tp" -C "$c" -z out -b 8 -e 8 -w 20 -n 200
            kcoll "$r-$tp-$c-16M" "$tp" -C "$c" -z out -b 16M -e 16M -w 1 -n 3
        done
    done
done
echo done
GUEST
vm_boot "$IMG" "$JOB" node0 10.77.3.1/24 1536 1500 24000 24001
a=$VM_PID
vm_boot "$IMG" "$JOB" node1 10.77.3.2/24 1536 1500 24001 24000
wait "$a" "$VM_PID" || true
echo "# soft-RoCE between two qemu TCG guests (kernel $(cat "$IMG/kernel.version")), $(nproc) host cores: $(lscpu | sed -n 's/^Model name: *//p')"
echo "perftest ib_write_lat 8 B: $(awk '/^ *8 /{print "typical " $5 " us, avg " $6 " us"}' "$JOB/perf-lat.out")"
for b in 64k:65536 1m:1048576 16m:16777216; do
    echo "perftest ib_write_bw ${b%%:*}: $(awk -v s="${b#*:}" '$1 == s {print $4 " MB/s average"} /^exit/{print}' "$JOB/perf-bw${b%%:*}.out")"
done
printf '%-6s %-10s %-11s %-7s %14s %12s\n' round transport collective size "time (us)" "algbw (GB/s)"
for f in "$JOB"/kcoll-*.out; do
    t=$(basename "$f" .out)
    IFS=- read -r _ r tp c sz <<<"$t"
    row=$(grep -E '^\[rank 0\] +[0-9]+ ' "$f" | head -1 || true)
    ok=$(grep -q 'Out of bounds values : 0 OK' "$f" && echo "" || echo " (FAILED: see $f)")
    # shellcheck disable=SC2086
    set -- $row
    printf '%-6s %-10s %-11s %-7s %14s %12s%s\n' "$r" "$tp" "$c" "$sz" "${8:-?}" "${9:-?}" "$ok"
done | sort -k1,1n -k3,3 -k4,4 -k2,2
echo "(job directory: $JOB)"
