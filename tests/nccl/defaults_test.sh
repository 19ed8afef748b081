#!/usr/bin/env bash
# kcoll's libnccl.so.2 takes NVIDIA NCCL's contract for deadlines (coll_set_defaults): an
# operation has no deadline of its own (a late peer, e.g. one saving a checkpoint, is waited for;
# the program's watchdog aborts) and ranks may arrive 1800 s apart. Without a deadline, waits
# still end: ncclCommAbort from another thread (abort 2) and ranks that die (shrink 4), with no
# COLL_TIMEOUT set. COLL_TIMEOUT still wins. NCCL_COMM_ID without COLL_JOB_SECRET is refused
# by ncclGetUniqueId (commid_test.sh: with it).
#   defaults_test.sh NCCL_TEST
set -uo pipefail
prog=$1
# shellcheck source=tests/unit/expect.sh
. "$(dirname "${BASH_SOURCE[0]}")/../unit/expect.sh"
run() { env -u COLL_TIMEOUT -u COLL_BOOTSTRAP_TIMEOUT -u COLL_DEBUG -u COLL_DEBUG_SUBSYS -u NCCL_DEBUG_SUBSYS "$@" 2>&1; }
out=$(run NCCL_DEBUG=INFO "$prog" abort 2)
rc=$?
expect "NCCL's defaults" "$out" "COLL_TIMEOUT = 0 (no deadline) (default)" \
    "COLL_BOOTSTRAP_TIMEOUT = 1800 (default)" "abort: 6 passed, 0 failed"
[ $rc = 0 ] || { failed=$((failed + 1)); echo "FAIL abort 2 without a deadline: rc $rc"; }
out=$(run "$prog" shrink 4)
rc=$?
expect "dead ranks without a deadline" "$out" "shrink: " " passed, 0 failed"
[ $rc = 0 ] || { failed=$((failed + 1)); echo "FAIL shrink 4 without a deadline: rc $rc"; }
out=$(run COLL_TIMEOUT=7 NCCL_DEBUG=INFO "$prog" abort 2)
expect "COLL_TIMEOUT wins" "$out" "COLL_TIMEOUT = 7 (environment)"
# NCCL_COMM_ID (every process makes the same id from it, in NCCL) without COLL_JOB_SECRET is
# refused at once, not a bootstrap that waits 1800 s for ranks that each hold their own id
out=$(run -u COLL_JOB_SECRET NCCL_COMM_ID=127.0.0.1:12345 timeout 20 "$prog" abort 2)
expect "NCCL_COMM_ID" "$out" "NCCL_COMM_ID=127.0.0.1:12345 is set, but COLL_JOB_SECRET is not"
echo "$passed passed, $failed failed"
[ $failed = 0 ]
