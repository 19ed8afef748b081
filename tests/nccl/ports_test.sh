#!/usr/bin/env bash
# Many communicators on one node, with few ephemeral ports: 8 ranks hold 64 communicators at
# once (nccl_test many) inside a network namespace whose ip_local_port_range is 2000 ports.
# Every two ranks of a node are joined by a link per communicator (1792 links here); when each
# link's connecting side took a port of its own at bind, the namespace ran out of ports ("bind:
# Address already in use"), as a real node (about 28000 ports, TIME_WAIT included) did at a few
# hundred communicators. The port is now chosen at connect, per destination.
#   ports_test.sh <nccl_test>          (root only: exits 77 otherwise)
set -u
PROG=${1:?usage: ports_test.sh <nccl_test>}
skip() {
    echo "SKIPPED: $*"
    exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root to make a network namespace"
command -v unshare >/dev/null 2>&1 || skip "unshare is not installed"
command -v ip >/dev/null 2>&1 || skip "ip (iproute2) is not installed"
unshare -n true 2>/dev/null || skip "this machine refuses new network namespaces"
# shellcheck disable=SC2016
exec unshare -n bash -c '
    ip link set lo up || exit 1
    echo "40000 41999" >/proc/sys/net/ipv4/ip_local_port_range || exit 1
    echo "ephemeral ports: $(cat /proc/sys/net/ipv4/ip_local_port_range)"
    COLL_SOCKET_IFNAME=lo NCCL_TEST_COMMS=${NCCL_TEST_COMMS:-64} exec "$0" many 8' "$PROG"
