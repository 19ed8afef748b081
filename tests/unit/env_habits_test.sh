#!/usr/bin/env bash
# NCCL, Gloo and typing habits are never silently ignored (base/envmap.c): an NCCL twin of an
# unset COLL_* name is honoured and said so, a disagreement is a WARN naming the winner, a COLL_*
# typo is a WARN with the closest name, NCCL knobs and GLOO_SOCKET_IFNAME get an INFO line,
# NCCL_NET=IB means RequireIB (and its failure names NCCL_NET), NCCL_DEBUG turns on the log.
#   env_habits_test.sh ENV_ONE   (a program that creates a 1-rank communicator, prints rc=N)
set -uo pipefail
prog=$1
# shellcheck source=tests/unit/expect.sh
. "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
run() { env -u COLL_SOCKET_IFNAME -u COLL_DEBUG -u COLL_DEBUG_SUBSYS -u NCCL_SOCKET_IFNAME "$@" "$prog" 2>&1; }
out=$(run COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=CONFIG NCCL_SOCKET_IFNAME=lo)
expect "NCCL twin honoured" "$out" "NCCL_SOCKET_IFNAME=lo is honoured as COLL_SOCKET_IFNAME=lo" \
    'COLL_SOCKET_IFNAME = "lo" (NCCL_SOCKET_IFNAME)' "rc=0"
out=$(run COLL_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=eth9)
expect "disagreement" "$out" \
    "WARN CONFIG COLL_SOCKET_IFNAME=lo and NCCL_SOCKET_IFNAME=eth9 disagree; kcoll uses COLL_SOCKET_IFNAME=lo" \
    "rc=0"
out=$(run COLL_SOCKET_IFNAME=lo COLL_SOCKET_IFNAM=lo COLL_TIMOUT=5)
expect "typos" "$out" \
    "WARN CONFIG COLL_SOCKET_IFNAM is not a kcoll setting and is ignored (did you mean COLL_SOCKET_IFNAME?)" \
    "WARN CONFIG COLL_TIMOUT is not a kcoll setting and is ignored (did you mean COLL_TIMEOUT?)" "rc=0"
out=$(run COLL_SOCKET_IFNAME=lo COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=CONFIG NCCL_ALGO=Ring \
    NCCL_IB_DISABLE=1 GLOO_SOCKET_IFNAME=eth0)
expect "knobs" "$out" "NCCL_ALGO=Ring is not read by kcoll (no equivalent)" \
    "NCCL_IB_DISABLE=1 is not read by kcoll; its equivalent: COLL_TRANSPORT=Socket" \
    "GLOO_SOCKET_IFNAME=eth0 is Gloo's; kcoll reads COLL_SOCKET_IFNAME (or NCCL_SOCKET_IFNAME)"
out=$(run COLL_SOCKET_IFNAME=lo NCCL_NET=IB COLL_TEST_IB_VERBS_LIB=libnotthere.so.1)
expect "NCCL_NET=IB" "$out" "NCCL_NET=IB (kcoll's COLL_TRANSPORT=RequireIB), but InfiniBand is not usable here" \
    "rc=9"
out=$(run COLL_SOCKET_IFNAME=lo NCCL_NET=Simple)
expect "NCCL_NET unknown" "$out" "WARN CONFIG NCCL_NET=Simple has no kcoll meaning and is ignored" "rc=0"
out=$(run COLL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ENV,GRAPH)
expect "NCCL_DEBUG" "$out" "NCCL_DEBUG=INFO is honoured as COLL_DEBUG=INFO" "INFO CONFIG COLL_TIMEOUT ="
echo "$passed passed, $failed failed"
[ $failed = 0 ]
