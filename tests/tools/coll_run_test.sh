#!/usr/bin/env bash
# Behaviour tests for coll-run. Usage: coll_run_test.sh PATH/TO/coll-run
# The ranks are `sh -c` one-liners, so nothing but coll_get_unique_id is needed from libcoll.
# shellcheck disable=SC2016 # the single-quoted scripts expand in the ranks, on purpose
set -uo pipefail

RUN=${1:?usage: coll_run_test.sh PATH/TO/coll-run}
[ -x "$RUN" ] || { echo "coll-run not found at $RUN"; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/coll-run-test.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
unset COLL_SOCKET_IFNAME COLL_RANK COLL_NRANKS COLL_LOCAL_RANK COLL_UNIQUE_ID

pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() {
    fail=$((fail + 1))
    echo "FAIL $1"
    echo "---- stdout"; cat "$TMP/out"
    echo "---- stderr"; cat "$TMP/err"
    echo "----"
}

# run_cr NAME ARGS...: runs coll-run; sets $rc and $elapsed (seconds, integer), output in files.
run_cr() {
    local start=$SECONDS
    "$RUN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
    elapsed=$((SECONDS - start))
}
out_has() { grep -q -- "$1" "$TMP/out"; }
err_has() { grep -q -- "$1" "$TMP/err"; }

# ---- bad usage: exit 2 with a message and the usage text
check_usage() {
    local name=$1 want=$2
    shift 2
    run_cr "$@"
    if [ "$rc" = 2 ] && err_has "$want" && err_has "^usage: coll-run"; then
        ok "usage: $name"
    else
        bad "usage: $name (rc=$rc, want 2 and '$want')"
    fi
}
check_usage "no arguments" "missing -n"
check_usage "-n missing" "missing -n" true
check_usage "-n without value" "needs a value" -n
check_usage "-n 0" "at least 1" -n 0 true
check_usage "-n negative" "at least 1" -n -3 true
check_usage "-n non-numeric" "not a number" -n two true
check_usage "-n trailing junk" "not a number" -n 2x true
check_usage "no program" "missing the program" -n 2
check_usage "no program after --" "missing the program" -n 2 --
check_usage "program not in PATH" "not found" -n 2 kcoll-no-such-program-xyz
check_usage "program path missing" "cannot be run" -n 2 /nonexistent/kcoll-prog
check_usage "unknown option" "unknown option" -n 2 --frobnicate true
check_usage "bad timeout" "timeout" -n 2 --timeout abc true
check_usage "zero timeout" "timeout" -n 2 --timeout 0 true

run_cr --help
if [ "$rc" = 0 ] && out_has "^usage: coll-run"; then ok "--help"; else bad "--help (rc=$rc)"; fi

# ---- success, prefixes, stdout and stderr kept apart, partial lines flushed
run_cr -n 3 sh -c 'echo "out $COLL_RANK"; echo "err $COLL_RANK" >&2; printf "tail-$COLL_RANK"'
if [ "$rc" = 0 ] &&
    [ "$(grep -c '^\[rank [0-2]\] out [0-2]$' "$TMP/out")" = 3 ] &&
    out_has '^\[rank 1\] out 1$' && out_has '^\[rank 2\] tail-2$' &&
    [ "$(grep -c '^\[rank [0-2]\] err [0-2]$' "$TMP/err")" = 3 ] && err_has '^\[rank 0\] err 0$' &&
    ! grep -q err "$TMP/out" && ! grep -q 'out ' "$TMP/err"; then
    ok "rank prefixes on stdout and stderr, partial line flushed"
else
    bad "rank prefixes (rc=$rc)"
fi

# ---- program options are not parsed by coll-run; -- is accepted
run_cr -n 1 -- sh -c 'echo "args:$*"' sh -n 5 --timeout
if [ "$rc" = 0 ] && out_has '^\[rank 0\] args:-n 5 --timeout$'; then
    ok "program arguments passed through"
else
    bad "program arguments (rc=$rc)"
fi

# ---- environment of the ranks
run_cr -n 2 sh -c 'echo "env $COLL_RANK/$COLL_NRANKS/$COLL_LOCAL_RANK/$COLL_SOCKET_IFNAME/${COLL_UNIQUE_ID%%:*}"'
if [ "$rc" = 0 ] && out_has '^\[rank 0\] env 0/2/0/lo/kcoll1$' &&
    out_has '^\[rank 1\] env 1/2/1/lo/kcoll1$'; then
    ok "COLL_* variables arrive (default interface lo)"
else
    bad "COLL_* variables (rc=$rc)"
fi

run_cr -n 3 sh -c 'echo "id $COLL_UNIQUE_ID"'
if [ "$rc" = 0 ] && [ "$(sed 's/^\[rank [0-9]*\] //' "$TMP/out" | sort -u | wc -l)" = 1 ]; then
    ok "every rank gets the same unique id"
else
    bad "same unique id (rc=$rc)"
fi

# Inherited values of the rank variables are replaced, not duplicated; others are kept.
COLL_RANK=99 COLL_NRANKS=99 COLL_UNIQUE_ID=stale KCOLL_TEST_MARK=kept \
    run_cr -n 2 sh -c 'echo "n=$(env | grep -c "^COLL_RANK=") r=$COLL_RANK w=$COLL_NRANKS m=$KCOLL_TEST_MARK id=${COLL_UNIQUE_ID%%:*}"'
if [ "$rc" = 0 ] && out_has '^\[rank 1\] n=1 r=1 w=2 m=kept id=kcoll1$'; then
    ok "inherited COLL_RANK/NRANKS/UNIQUE_ID replaced, other variables kept"
else
    bad "inherited environment (rc=$rc)"
fi

# A COLL_SOCKET_IFNAME set by the user is kept as it is ...
COLL_SOCKET_IFNAME=lo run_cr -n 2 sh -c 'echo "if=$COLL_SOCKET_IFNAME n=$(env | grep -c "^COLL_SOCKET_IFNAME=")"'
if [ "$rc" = 0 ] && out_has '^\[rank 1\] if=lo n=1$'; then
    ok "user's COLL_SOCKET_IFNAME kept"
else
    bad "user's COLL_SOCKET_IFNAME (rc=$rc)"
fi
# ... and an explicit --ifname wins over it.
COLL_SOCKET_IFNAME=kcoll-bogus0 run_cr -n 2 --ifname lo sh -c 'echo "if=$COLL_SOCKET_IFNAME n=$(env | grep -c "^COLL_SOCKET_IFNAME=")"'
if [ "$rc" = 0 ] && out_has '^\[rank 0\] if=lo n=1$'; then
    ok "--ifname overrides COLL_SOCKET_IFNAME"
else
    bad "--ifname override (rc=$rc)"
fi

# ---- a failing rank: non-zero exit naming it; the others are stopped quickly
run_cr -n 3 sh -c 'if [ "$COLL_RANK" = 1 ]; then sleep 0.2; exit 3; fi; exec sleep 30'
if [ "$rc" != 0 ] && err_has 'rank 1 (pid [0-9]*) exited with status 3' && [ "$elapsed" -lt 15 ]; then
    ok "rank exiting 3 fails the job and is named (rc=$rc, ${elapsed}s)"
else
    bad "rank exit 3 (rc=$rc, ${elapsed}s)"
fi

# ---- a rank killed by a signal is named with the signal
run_cr -n 3 sh -c 'if [ "$COLL_RANK" = 2 ]; then sleep 0.2; kill -SEGV $$; fi; exec sleep 30'
if [ "$rc" != 0 ] && err_has 'rank 2 (pid [0-9]*) was killed by signal SIGSEGV' && [ "$elapsed" -lt 15 ]; then
    ok "rank killed by SIGSEGV is named (rc=$rc, ${elapsed}s)"
else
    bad "rank killed by signal (rc=$rc, ${elapsed}s)"
fi

# ---- a rank that ignores SIGTERM gets SIGKILL after the grace period
run_cr -n 2 sh -c 'trap "" TERM; echo armed; if [ "$COLL_RANK" = 0 ]; then sleep 1; exit 1; fi; sleep 30'
if [ "$rc" != 0 ] && err_has 'rank 0 (pid [0-9]*) exited with status 1' && err_has 'SIGKILL' &&
    [ "$elapsed" -lt 15 ]; then
    ok "rank ignoring SIGTERM is killed with SIGKILL (${elapsed}s)"
else
    bad "SIGKILL escalation (rc=$rc, ${elapsed}s)"
fi

# ---- --timeout
run_cr -n 2 --timeout 1 sleep 30
if [ "$rc" = 124 ] && err_has 'timeout' && [ "$elapsed" -lt 15 ]; then
    ok "--timeout stops the ranks and says so (${elapsed}s)"
else
    bad "--timeout (rc=$rc, ${elapsed}s)"
fi

# ---- big outputs on stdout and stderr at once do not deadlock, and no line is lost or torn
run_cr -n 4 --timeout 100 sh -c 'seq 1 50000; seq 1 50000 >&2'
if [ "$rc" = 0 ] && [ "$(grep -c '^\[rank [0-3]\] [0-9]*$' "$TMP/out")" = 200000 ] &&
    [ "$(wc -l <"$TMP/out")" = 200000 ] &&
    [ "$(grep -c '^\[rank [0-3]\] [0-9]*$' "$TMP/err")" = 200000 ] &&
    out_has '^\[rank 3\] 50000$'; then
    ok "big outputs forwarded whole"
else
    bad "big outputs (rc=$rc, $(wc -l <"$TMP/out") stdout lines)"
    : >"$TMP/out"
fi

# ---- SIGTERM to coll-run is forwarded to the ranks
"$RUN" -n 2 sh -c 'trap "echo got-term; exit 0" TERM; echo ready; sleep 30 & wait' \
    >"$TMP/out" 2>"$TMP/err" </dev/null &
pid=$!
for _ in $(seq 100); do
    [ "$(grep -c ready "$TMP/out")" = 2 ] && break
    sleep 0.1
done
kill -TERM "$pid"
wait "$pid"
rc=$?
if [ "$rc" = 143 ] && [ "$(grep -c '^\[rank [01]\] got-term$' "$TMP/out")" = 2 ]; then
    ok "SIGTERM forwarded to every rank"
else
    bad "SIGTERM forwarding (rc=$rc)"
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
