#!/usr/bin/env bash
# coll_comm_init_env (issue 19, item 4): torchrun's variables start a job with no other setup.
# Three processes with MASTER_ADDR=127.0.0.1, a free MASTER_PORT, RANK and WORLD_SIZE all-reduce
# (rank 0 hosts the root on that port); a shared COLL_JOB_SECRET authenticates them, and without
# it rank 0 warns that nothing is; a rank with another secret is refused as a stranger and the
# others name it missing; a port already taken, a missing WORLD_SIZE and a rank out of range each
# get one clear error; COLL_UNIQUE_ID and COLL_AGENT_SOCKET take precedence (coll-run's path).
#   env_init_test.sh ENV_INIT COLL_RUN   (ENV_INIT calls coll_comm_init_env, all-reduces its
#                                         rank and prints "rc=N sum=S")
set -uo pipefail
prog=$1
collrun=${2:-}
# shellcheck source=tests/unit/expect.sh
. "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
free_port() { python3 "$(dirname "${BASH_SOURCE[0]}")/../free_port.py"; }
clean() { env -u COLL_UNIQUE_ID -u COLL_AGENT_SOCKET -u COLL_RANK -u COLL_NRANKS -u MASTER_ADDR \
    -u MASTER_PORT -u RANK -u WORLD_SIZE -u COLL_JOB_SECRET -u COLL_MASTER_PORT \
    COLL_SOCKET_IFNAME=lo COLL_BOOTSTRAP_TIMEOUT=${BT:-20} "$@"; }
job() { # world secret... (one per rank, "-" for none): runs the ranks, prints their outputs
    local world=$1 port
    shift
    port=$(free_port)
    local dir
    dir=$(mktemp -d)
    for ((r = 0; r < world; r++)); do
        local sec=${1:--}
        shift || true
        if [ "$sec" = - ]; then
            clean MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$world "$prog" \
                >"$dir/$r" 2>&1 &
        else
            clean MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$world \
                COLL_JOB_SECRET=$sec "$prog" >"$dir/$r" 2>&1 &
        fi
    done
    wait
    for ((r = 0; r < world; r++)); do sed "s/^/[$r] /" "$dir/$r"; done
    rm -rf "$dir"
}
S1=00112233445566778899aabbccddeeff
S2=ffeeddccbbaa99887766554433221100
out=$(job 3 $S1 $S1 $S1)
expect "MASTER_ADDR job" "$out" "[0] rc=0 sum=3" "[1] rc=0 sum=3" "[2] rc=0 sum=3"
if grep -q "COLL_JOB_SECRET is not set" <<<"$out"; then
    failed=$((failed + 1)) && echo "FAIL: a WARN about the secret although it is set"
fi
out=$(job 2 - -)
expect "no secret" "$out" "[0] rc=0 sum=1" "[1] rc=0 sum=1" \
    "COLL_JOB_SECRET is not set, so this job's connections are not authenticated"
out=$(BT=4 job 3 $S1 $S2 $S1)
expect "another secret" "$out" "[0] rc=" "missing: rank 1" \
    "dropped connection from 127.0.0.1" "[1] rc="
if grep -q "\[1\] rc=0" <<<"$out"; then
    failed=$((failed + 1)) && echo "FAIL: the rank with another secret joined"
fi
ready=$(mktemp -u)
python3 -c "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen()
open(sys.argv[1], 'w').write(str(s.getsockname()[1])); time.sleep(6)" "$ready" &
for _ in $(seq 100); do [ -s "$ready" ] && break; sleep 0.1; done
port=$(cat "$ready")
rm -f "$ready"
out=$(clean MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=0 WORLD_SIZE=2 COLL_JOB_SECRET=$S1 "$prog" 2>&1)
expect "port taken" "$out" "rc=" "The port of MASTER_PORT is taken on this host" "COLL_MASTER_PORT"
wait
out=$(clean MASTER_ADDR=127.0.0.1 MASTER_PORT=1234 RANK=0 "$prog" 2>&1)
expect "no WORLD_SIZE" "$out" "coll_comm_init_env: WORLD_SIZE is not set"
out=$(clean MASTER_ADDR=127.0.0.1 MASTER_PORT=1234 RANK=5 WORLD_SIZE=2 "$prog" 2>&1)
expect "rank out of range" "$out" 'RANK="5" is not a number from 0 to 1'
out=$(clean "$prog" 2>&1)
expect "nothing set" "$out" "nothing to start from" "MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE"
if [ -x "$collrun" ]; then
    out=$(clean MASTER_ADDR=no.such.host MASTER_PORT=1 "$collrun" -n 2 "$prog" 2>&1)
    expect "COLL_UNIQUE_ID first" "$out" "rc=0 sum=1"
fi
echo "env_init_test: $passed checks passed, $failed failed"
[ "$failed" = 0 ]
