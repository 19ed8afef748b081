#!/usr/bin/env bash
# NCCL, Gloo and typing habits are never silently ignored (base/envmap.c): an NCCL twin of an
# unset COLL_* name is honoured and said so, a disagreement is a WARN naming the winner, a COLL_*
# typo is a WARN with the closest name, NCCL knobs and GLOO_SOCKET_IFNAME get an INFO line,
# NCCL_NET=IB means RequireIB (and its failure names NCCL_NET), NCCL_DEBUG turns on the log,
# NCCL_DEBUG_FILE sends it to a file.
#   env_habits_test.sh ENV_ONE   (a program that creates a 1-rank communicator, prints rc=N)
set -uo pipefail
prog=$1
# shellcheck source=tests/unit/expect.sh
. "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
run() { env -u COLL_SOCKET_IFNAME -u COLL_DEBUG -u COLL_DEBUG_SUBSYS -u COLL_DEBUG_FILE -u NCCL_SOCKET_IFNAME -u NCCL_DEBUG_FILE "$@" "$prog" 2>&1; }
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
# NCCL_DEBUG_FILE (or COLL_DEBUG_FILE): the log goes to that file, %h the host, %p the pid
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$(run COLL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ENV NCCL_DEBUG_FILE="$tmp/k.%h.%p.log")
expect "NCCL_DEBUG_FILE: stdout" "$out" "rc=0"
if grep -q "kcoll" <<<"$out"; then
    failed=$((failed + 1))
    echo "FAIL NCCL_DEBUG_FILE: log lines on stderr:"
    sed 's/^/  /' <<<"$out"
fi
files=("$tmp"/k."$(hostname)".*.log)
if [ ${#files[@]} = 1 ] && [[ ${files[0]} =~ \.[0-9]+\.log$ ]]; then
    passed=$((passed + 1))
    expect "NCCL_DEBUG_FILE: the file" "$(cat "${files[0]}")" \
        "NCCL_DEBUG_FILE=$tmp/k.%h.%p.log is honoured as COLL_DEBUG_FILE=$tmp/k.%h.%p.log" \
        "kcoll INFO CONFIG COLL_TIMEOUT ="
else
    failed=$((failed + 1))
    echo "FAIL NCCL_DEBUG_FILE: no single file k.<host>.<pid>.log in $tmp: $(ls "$tmp")"
fi
out=$(run COLL_SOCKET_IFNAME=lo COLL_DEBUG_FILE="$tmp/a.log" NCCL_DEBUG_FILE="$tmp/b.log")
expect "COLL_DEBUG_FILE wins" "$(cat "$tmp/a.log" 2>&1)" \
    "COLL_DEBUG_FILE=$tmp/a.log and NCCL_DEBUG_FILE=$tmp/b.log disagree; kcoll uses COLL_DEBUG_FILE"
[ -e "$tmp/b.log" ] && failed=$((failed + 1)) && echo "FAIL COLL_DEBUG_FILE wins: b.log exists"
out=$(run COLL_SOCKET_IFNAME=lo COLL_DEBUG_FILE=/nonexistent-dir/x.log COLL_TIMOUT=5)
expect "COLL_DEBUG_FILE unwritable" "$out" \
    "WARN CONFIG COLL_DEBUG_FILE=/nonexistent-dir/x.log: cannot open /nonexistent-dir/x.log: No such file or directory; logging to stderr" \
    "COLL_TIMOUT is not a kcoll setting" "rc=0"
# kcoll's own defaults for deadlines (libnccl.so.2 takes NCCL's: tests/nccl/defaults_test.sh);
# COLL_TIMEOUT=0 is no deadline; a negative one is refused, naming the variable
out=$(run COLL_SOCKET_IFNAME=lo COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=CONFIG)
expect "kcoll's deadlines" "$out" "COLL_TIMEOUT = 300 (default)" \
    "COLL_BOOTSTRAP_TIMEOUT = 120 (default)" "rc=0"
out=$(run COLL_SOCKET_IFNAME=lo COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=CONFIG COLL_TIMEOUT=0)
expect "COLL_TIMEOUT=0" "$out" "COLL_TIMEOUT = 0 (no deadline) (environment)" "rc=0"
out=$(run COLL_SOCKET_IFNAME=lo COLL_TIMEOUT=-1)
expect "COLL_TIMEOUT=-1" "$out" \
    'COLL_TIMEOUT="-1" is not valid: expected a number of seconds, or 0 for no deadline' "rc=1"
echo "$passed passed, $failed failed"
[ $failed = 0 ]
