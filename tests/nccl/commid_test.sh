#!/usr/bin/env bash
# NCCL_COMM_ID under kcoll's libnccl.so.2: every process makes its own unique id from the address
# and COLL_JOB_SECRET (the same on every rank), rank 0 hosts the root there at ncclCommInitRank.
# 3 ranks started one by one (rank 0 last, 1 s late: the others retry) sum; a rank with another
# secret is kept out and fails, and so do the others, within COLL_BOOTSTRAP_TIMEOUT; the port
# taken on rank 0's host, a malformed address and a missing secret fail at once saying what to do.
# Under the kcoll agent (coll-run --agent), no COLL_JOB_SECRET is needed: the agents hold the
# job's secret.
#   commid_test.sh NCCL_COMMID_PROGRAM [COLL_RUN COLL_AGENT]
set -uo pipefail
prog=$1
collrun=${2:-}
agent=${3:-}
# shellcheck source=tests/unit/expect.sh
. "$(dirname "${BASH_SOURCE[0]}")/../unit/expect.sh"
S1=00112233445566778899aabbccddeeff S2=ffeeddccbbaa99887766554433221100
port=$(python3 "$(dirname "${BASH_SOURCE[0]}")/../free_port.py")
clean() { env -u COLL_DEBUG -u NCCL_DEBUG COLL_SOCKET_IFNAME=lo "$@"; }
# job SECRET: ranks 2, 1, then 0 one second later, all with SECRET; every rank's output
job() {
    local dir r
    dir=$(mktemp -d)
    for r in 2 1 0; do
        [ "$r" = 0 ] && sleep 1
        clean COLL_BOOTSTRAP_TIMEOUT=30 COLL_TIMEOUT=20 NCCL_COMM_ID=127.0.0.1:$port \
            COLL_JOB_SECRET="$1" timeout 60 "$prog" "$r" 3 >"$dir/$r" 2>&1 &
    done
    wait
    cat "$dir"/0 "$dir"/1 "$dir"/2
    rm -rf "$dir"
}
out=$(job "$S1")
expect "same secret" "$out" "rank 0: sum 6" "rank 1: sum 6" "rank 2: sum 6"
# rank 1 with another secret: the root drops it; nobody gets a communicator
dir=$(mktemp -d)
for r in 2 1 0; do
    [ "$r" = 0 ] && sleep 1
    s=$S1
    [ "$r" = 1 ] && s=$S2
    clean COLL_BOOTSTRAP_TIMEOUT=5 COLL_TIMEOUT=10 NCCL_COMM_ID=127.0.0.1:$port \
        COLL_JOB_SECRET=$s timeout 60 "$prog" "$r" 3 >"$dir/$r" 2>&1 &
done
wait
out=$(cat "$dir"/0 "$dir"/1 "$dir"/2)
rm -rf "$dir"
expect "another secret" "$out" "rank 0: FAIL" "rank 1: FAIL" "rank 2: FAIL"
# the port taken on rank 0's host
ready=$(mktemp -u)
python3 -c "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen()
open(sys.argv[1], 'w').write(str(s.getsockname()[1])); time.sleep(5)" "$ready" &
for _ in $(seq 100); do [ -s "$ready" ] && break; sleep 0.1; done
busy=$(cat "$ready")
rm -f "$ready"
out=$(clean NCCL_COMM_ID=127.0.0.1:$busy COLL_JOB_SECRET=$S1 timeout 20 "$prog" 0 2)
expect "port taken" "$out" "rank 0: FAIL" "cannot host the bootstrap root" \
    "The port of the unique id's address (NCCL_COMM_ID under libnccl.so.2) is taken"
wait
out=$(clean NCCL_COMM_ID=127.0.0.1 COLL_JOB_SECRET=$S1 timeout 20 "$prog" 0 2)
expect "no port" "$out" "NCCL_COMM_ID" "\"127.0.0.1\" is not <host>:<port>"
out=$(clean NCCL_COMM_ID=no-such-host.invalid:1234 COLL_JOB_SECRET=$S1 timeout 20 "$prog" 1 2)
expect "no such host" "$out" "no-such-host.invalid:1234 does not resolve"
out=$(clean NCCL_COMM_ID=127.0.0.1:$port COLL_JOB_SECRET=123 timeout 20 "$prog" 1 2)
expect "short secret" "$out" "must be 32 hex digits"
out=$(env -u COLL_JOB_SECRET -u COLL_DEBUG -u NCCL_DEBUG COLL_SOCKET_IFNAME=lo NCCL_COMM_ID=127.0.0.1:$port \
    timeout 20 "$prog" 1 2)
expect "no secret" "$out" "NCCL_COMM_ID=127.0.0.1:$port is set, but COLL_JOB_SECRET is not"
if [ -n "$collrun" ]; then
    # the agent hands each rank the job's secret: COLL_JOB_SECRET unset, 3 ranks sum
    out=$(env -u COLL_JOB_SECRET -u COLL_DEBUG -u NCCL_DEBUG NCCL_COMM_ID=127.0.0.1:$port \
        COLL_BOOTSTRAP_TIMEOUT=30 timeout 60 "$collrun" -n 3 --ifname lo --agent="$agent" \
        sh -c 'exec "$0" "$COLL_LOCAL_RANK" 3' "$prog" 2>&1)
    expect "agent's secret" "$out" "rank 0: sum 6" "rank 1: sum 6" "rank 2: sum 6"
else
    echo "commid_test: the agent case SKIPPED (coll-run and coll-agent were not built)"
fi
echo "commid_test: $passed checks passed, $failed failed"
[ "$failed" = 0 ]
