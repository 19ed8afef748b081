#!/usr/bin/env bash
# Behaviour tests for coll-run. Usage: coll_run_test.sh PATH/TO/coll-run [PATH/TO/coll-agent]
# With COLL_PERF_BIN=PATH/TO/coll-perf in the environment, coll-perf's flags and its two ways of
# creating a communicator (unique id, agent) are checked too.
# The ranks are `sh -c` one-liners, so nothing but coll_get_unique_id is needed from libcoll.
# With a coll-agent, the --agent mode is tested too (real standalone agents, and fake agents for
# the failure paths); the ranks that create a communicator through it are in tests/e2e/.
# shellcheck disable=SC2016 # the single-quoted scripts expand in the ranks, on purpose
set -uo pipefail

RUN=${1:?usage: coll_run_test.sh PATH/TO/coll-run [PATH/TO/coll-agent]}
AGENT=${2:-}
PERF=${COLL_PERF_BIN:-}
[ -x "$RUN" ] || { echo "coll-run not found at $RUN"; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/coll-run-test.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
unset COLL_SOCKET_IFNAME COLL_RANK COLL_NRANKS COLL_LOCAL_RANK COLL_UNIQUE_ID COLL_AGENT_SOCKET
unset COLL_BOOTSTRAP_TIMEOUT COLL_TIMEOUT

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

# ==== --agent ====
check_usage "--pin-version without --agent" "needs --agent" -n 2 --pin-version 1.0 true
check_usage "--agent=PATH missing" "cannot be run" -n 2 --agent=/nonexistent/coll-agent true
check_usage "--agent= empty" "empty path" -n 2 --agent= true
run_cr --help
if [ "$rc" = 0 ] && out_has "--agent\[=PATH\]" && out_has "--pin-version"; then
    ok "--help documents --agent and --pin-version"
else
    bad "--help for --agent (rc=$rc)"
fi

# Fake agents for the failure paths: shell scripts that take the agent's command line.
cat >"$TMP/agent-false" <<'EOS'
#!/bin/sh
echo "fake agent: cannot start" >&2
exit 1
EOS
cat >"$TMP/agent-sleep" <<'EOS'
#!/bin/sh
echo "fake agent $4: never opens $6"
exec sleep 30
EOS
cat >"$TMP/agent-stubborn" <<'EOS'
#!/bin/sh
# opens its socket, then ignores SIGTERM
trap '' TERM
python3 -c 'import socket,sys,time; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); time.sleep(60)' "$6" &
wait
EOS
chmod +x "$TMP/agent-false" "$TMP/agent-sleep" "$TMP/agent-stubborn"

# No temporary directory of ours may be left behind: coll-run makes them under $TMPDIR.
export TMPDIR="$TMP/tmpdir"
mkdir -p "$TMPDIR"
tmp_left() { find "$TMPDIR" -mindepth 1 -maxdepth 1 -name 'coll-run.*' | wc -l; }

run_cr -n 2 --agent="$TMP/agent-false" sh -c 'echo rank-ran'
if [ "$rc" = 1 ] && err_has '^\[agent [01]\] fake agent: cannot start$' &&
    err_has 'agent [01] (pid [0-9]*) exited with status 1 before its rank started' &&
    ! out_has rank-ran && [ "$(tmp_left)" = 0 ]; then
    ok "--agent: an agent that exits at once fails the job (exit 1), no rank starts"
else
    bad "--agent: agent exiting at start (rc=$rc, $(tmp_left) dirs left)"
fi

run_cr -n 2 --timeout 1 --agent="$TMP/agent-sleep" sh -c 'echo rank-ran'
if [ "$rc" = 124 ] && err_has 'while the agents were starting' && ! out_has rank-ran &&
    out_has '^\[agent 1\] fake agent 1: never opens .*/agent1.sock$' && [ "$elapsed" -lt 10 ] &&
    [ "$(tmp_left)" = 0 ]; then
    ok "--agent: --timeout covers agents that never open their socket (${elapsed}s)"
else
    bad "--agent: agent without socket (rc=$rc, ${elapsed}s)"
fi

if command -v python3 >/dev/null; then
    run_cr -n 2 --agent="$TMP/agent-stubborn" sh -c 'test -S "$COLL_AGENT_SOCKET" && echo sock-ok'
    if [ "$rc" = 0 ] && [ "$(grep -c 'sock-ok' "$TMP/out")" = 2 ] &&
        err_has 'agent(s) still running 2 s after SIGTERM; sending SIGKILL' &&
        [ "$elapsed" -lt 15 ] && [ "$(tmp_left)" = 0 ]; then
        ok "--agent: agents ignoring SIGTERM get SIGKILL after the ranks are done (${elapsed}s)"
    else
        bad "--agent: stubborn agents (rc=$rc, ${elapsed}s)"
    fi
fi

if [ -z "$AGENT" ] || [ ! -x "$AGENT" ]; then
    echo "skip --agent with a real coll-agent: none given (coll-agent not built)"
else
    VERSION=$(sed -n 's/.*coll-run.s library, \([^;]*\);.*/\1/p' < <("$RUN" --help))
    topo_py='import json, os, sys
t = json.load(open(os.path.join(os.path.dirname(os.environ["COLL_AGENT_SOCKET"]), "topology.json")))
r = t["ranks"]
print("topo n=%d ranks=%d port=%s secret=%d transport=%s version=%s if=%s addr=%s boot=%s tmo=%s" % (
    t["nranks"], len(r), "ok" if 0 < t["port"] < 65536 else t["port"],
    len(t["secret"]) if all(c in "0123456789abcdef" for c in t["secret"]) else -1,
    t["transport"], t.get("libraryVersion", "none"), r[0]["interface"], r[0]["address"],
    t["bootstrapTimeoutSeconds"], t["timeoutSeconds"]))'
    export topo_py

    COLL_RANK=7 COLL_NRANKS=9 COLL_UNIQUE_ID=stale run_cr -n 3 --agent="$AGENT" sh -c \
        'echo "env lr=$COLL_LOCAL_RANK r=${COLL_RANK-unset} n=${COLL_NRANKS-unset} id=${COLL_UNIQUE_ID-unset} sock=${COLL_AGENT_SOCKET##*/}"
         test -S "$COLL_AGENT_SOCKET" && echo "socket ok"
         python3 -c "$topo_py"; echo "dir $(dirname "$COLL_AGENT_SOCKET")"'
    dir=$(sed -n 's/^\[rank 0\] dir //p' "$TMP/out")
    if [ "$rc" = 0 ] && out_has '^\[rank 2\] env lr=2 r=unset n=unset id=unset sock=agent2.sock$' &&
        [ "$(grep -c '^\[rank [0-2]\] socket ok$' "$TMP/out")" = 3 ]; then
        ok "--agent: ranks get COLL_AGENT_SOCKET and COLL_LOCAL_RANK, no COLL_UNIQUE_ID/RANK/NRANKS"
    else
        bad "--agent: rank environment (rc=$rc)"
    fi
    if [ "$(grep -c "^\[rank [0-2]\] topo n=3 ranks=3 port=ok secret=32 transport=Socket version=$VERSION if=lo addr=127.0.0.1 boot=120 tmo=300$" "$TMP/out")" = 3 ] &&
        [ "$(sed -n 's/^\[rank [0-9]\] topo //p' "$TMP/out" | sort -u | wc -l)" = 1 ]; then
        ok "--agent: one topology (free port, 32-hex secret, Socket, pin $VERSION, lo)"
    else
        bad "--agent: topology contents (version '$VERSION')"
    fi
    if [ "$(grep -c '^\[agent [0-2]\] .* AGENT-READY rank [0-2] of 3 ' "$TMP/err")" = 3 ] &&
        [ "$(grep -c '^\[agent [0-2]\] .* AGENT-STOP ' "$TMP/err")" = 3 ] &&
        ! grep -v '^\[agent [0-2]\] ' "$TMP/err" | grep -q .; then
        ok "--agent: the agents' output is prefixed [agent R]; they are stopped at the end"
    else
        bad "--agent: agent output"
    fi
    pids=$(sed -n 's/^\[agent [0-9]*\] .* coll-agent\[\([0-9]*\)\] .*/\1/p' "$TMP/err" | sort -u)
    alive=0
    for p in $pids; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
    if [ -n "$dir" ] && [ ! -e "$dir" ] && [ "$(tmp_left)" = 0 ] && [ "$alive" = 0 ] &&
        [ "$(echo "$pids" | wc -w)" = 3 ]; then
        ok "--agent: temporary directory removed, no agent left running"
    else
        bad "--agent: cleanup (dir '$dir', $alive agents alive)"
    fi

    run_cr -n 2 --agent="$AGENT" --pin-version 9.9.9 sh -c 'python3 -c "$topo_py"'
    if [ "$rc" = 0 ] && out_has '^\[rank 1\] topo .* version=9.9.9 '; then
        ok "--agent: --pin-version sets the topology's libraryVersion"
    else
        bad "--agent: --pin-version (rc=$rc)"
    fi
    COLL_BOOTSTRAP_TIMEOUT=7 COLL_TIMEOUT=2.5 run_cr -n 1 --agent="$AGENT" --pin-version '' \
        --ifname =lo sh -c 'python3 -c "$topo_py"'
    if [ "$rc" = 0 ] && out_has '^\[rank 0\] topo n=1 .* version=none if=lo addr=127.0.0.1 boot=7 tmo=3$'; then
        ok "--agent: --pin-version '' pins none; --ifname and COLL_*TIMEOUT reach the topology"
    else
        bad "--agent: no pin / timeouts (rc=$rc)"
    fi

    run_cr -n 2 --agent="$AGENT" --ifname kcollnosuch9 true
    if [ "$rc" = 1 ] && err_has "no interface that is up matches the interface spec 'kcollnosuch9'" &&
        err_has 'lo 127.0.0.1' && [ "$(tmp_left)" = 0 ]; then
        ok "--agent: an interface spec nothing matches is named with the host's interfaces"
    else
        bad "--agent: bad --ifname (rc=$rc)"
    fi

    run_cr -n 3 --agent="$AGENT" sh -c 'if [ "$COLL_LOCAL_RANK" = 1 ]; then sleep 0.3; exit 3; fi; exec sleep 30'
    if [ "$rc" = 3 ] && err_has 'rank 1 (pid [0-9]*) exited with status 3' && [ "$elapsed" -lt 15 ] &&
        [ "$(grep -c 'AGENT-STOP' "$TMP/err")" = 3 ] && [ "$(tmp_left)" = 0 ]; then
        ok "--agent: a failing rank is named, the others and the agents stopped (${elapsed}s)"
    else
        bad "--agent: failing rank (rc=$rc, ${elapsed}s)"
    fi

    "$RUN" -n 2 --agent="$AGENT" sh -c 'trap "echo got-term; exit 0" TERM; echo ready; sleep 30 & wait' \
        >"$TMP/out" 2>"$TMP/err" </dev/null &
    pid=$!
    for _ in $(seq 100); do
        [ "$(grep -c ready "$TMP/out")" = 2 ] && break
        sleep 0.1
    done
    kill -TERM "$pid"
    wait "$pid"
    rc=$?
    if [ "$rc" = 143 ] && [ "$(grep -c '^\[rank [01]\] got-term$' "$TMP/out")" = 2 ] &&
        [ "$(grep -c 'AGENT-STOP' "$TMP/err")" = 2 ] && [ "$(tmp_left)" = 0 ]; then
        ok "--agent: SIGTERM reaches the ranks, then the agents stop and the directory goes"
    else
        bad "--agent: SIGTERM (rc=$rc)"
    fi

    # The default: coll-agent next to coll-run, else the build tree's k8s-agent/, else PATH.
    if [ -x "$(dirname "$RUN")/coll-agent" ] || [ -x "$(dirname "$RUN")/../k8s-agent/coll-agent" ]; then
        run_cr -n 2 --agent sh -c 'test -S "$COLL_AGENT_SOCKET" && echo found'
        if [ "$rc" = 0 ] && [ "$(grep -c found "$TMP/out")" = 2 ]; then
            ok "--agent without PATH finds the coll-agent of this build"
        else
            bad "--agent default lookup (rc=$rc)"
        fi
    fi
    mkdir -p "$TMP/pathdir"
    ln -sf "$(cd "$(dirname "$AGENT")" && pwd)/$(basename "$AGENT")" "$TMP/pathdir/coll-agent"
    PATH="$TMP/pathdir:$PATH" run_cr -n 1 --agent=coll-agent sh -c 'test -S "$COLL_AGENT_SOCKET" && echo found'
    if [ "$rc" = 0 ] && out_has '^\[rank 0\] found$'; then
        ok "--agent=NAME is looked up in PATH"
    else
        bad "--agent=NAME in PATH (rc=$rc)"
    fi
fi

# ==== coll-perf: nccl-tests flags (-c is check, -C the collective), unique id and agent ====
if [ -z "$PERF" ] || [ ! -x "$PERF" ]; then
    echo "skip coll-perf: COLL_PERF_BIN not set (coll-perf not built)"
else
    "$PERF" -c all_reduce >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
    if [ "$rc" = 2 ] && err_has "invalid value 'all_reduce' for -c/--check (0 or 1); the collective is -C/--collective all_reduce"; then
        ok "coll-perf: -c is check (0|1); a collective name there points to -C"
    else
        bad "coll-perf -c all_reduce (rc=$rc)"
    fi
    "$PERF" --help >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
    if [ "$rc" = 0 ] && out_has '^  -C, --collective NAME' && out_has '^  -c, --check 0|1' &&
        out_has 'COLL_AGENT_SOCKET'; then
        ok "coll-perf --help: -C/--collective, -c/--check, COLL_AGENT_SOCKET"
    else
        bad "coll-perf --help (rc=$rc)"
    fi
    run_cr -n 2 --timeout 100 "$PERF" -C all_gather -b 1K -e 4K -f 2 -n 2 -w 1 -c 1
    if [ "$rc" = 0 ] && out_has '^\[rank 0\] # Collective: all_gather$' &&
        out_has '^\[rank 0\] # communicator: coll_comm_init_rank from COLL_UNIQUE_ID' &&
        out_has '^\[rank 0\] *4096 .* float32 ' && out_has '^\[rank 0\] # Out of bounds values : 0 OK$'; then
        ok "coll-perf -C all_gather -c 1 under coll-run (unique id)"
    else
        bad "coll-perf -C all_gather (rc=$rc)"
    fi
    # -R 1: coll_mem_alloc buffers, every collective on the single-copy path from 1 byte, checked
    run_cr -n 3 --timeout 100 env COLL_SHM_DIRECT_MIN=1 COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=SHM \
        "$PERF" -C all -b 1K -e 1M -f 32 -n 2 -w 1 -c 1 -R 1
    if [ "$rc" = 0 ] && out_has 'buffers: coll_mem_alloc$' &&
        { out_has 'single-copy path: every rank.s buffers' || err_has 'single-copy path: every rank.s buffers'; } &&
        out_has '^\[rank 0\] # Collective: all_to_all$' &&
        out_has '^\[rank 0\] # Out of bounds values : 0 OK$'; then
        ok "coll-perf -R 1: every collective on coll_mem_alloc buffers (single copy), checked"
    else
        bad "coll-perf -R 1 (rc=$rc)"
    fi
    run_cr -n 2 --timeout 100 "$PERF" -R 2
    if [ "$rc" != 0 ] && { out_has "invalid value '2' for -R" || err_has "invalid value '2' for -R"; }; then
        ok "coll-perf -R 2 is refused"
    else
        bad "coll-perf -R 2 (rc=$rc)"
    fi
    run_cr -n 2 --timeout 100 "$PERF" -b 1K -e 1K -n 1 -w 0 --check 0
    if [ "$rc" = 0 ] && out_has 'check: 0 ' && out_has '(not checked)' &&
        out_has '^\[rank 0\] # Collective: all_reduce$'; then
        ok "coll-perf --check 0; all_reduce by default"
    else
        bad "coll-perf --check 0 (rc=$rc)"
    fi
    if [ -n "$AGENT" ] && [ -x "$AGENT" ]; then
        run_cr -n 3 --timeout 100 --agent="$AGENT" "$PERF" -C broadcast -r 2 -b 1K -e 2K -n 2 -w 1 -c 1
        if [ "$rc" = 0 ] &&
            out_has '^\[rank 0\] # communicator: coll_comm_init_agent; rank, world size (3), root and pins supplied by the kcoll agent at .*/agent0.sock' &&
            out_has '^\[rank 0\] # kcoll .*, nranks 3, ' && out_has '^\[rank 0\] # Collective: broadcast$' &&
            out_has '^\[rank 0\] # Out of bounds values : 0 OK$'; then
            ok "coll-perf under coll-run --agent: coll_comm_init_agent, the agent's world size"
        else
            bad "coll-perf under --agent (rc=$rc)"
        fi
        run_cr -n 2 --timeout 100 --agent="$AGENT" "$PERF" -C broadcast -r 5 -b 1K -e 1K
        if [ "$rc" = 1 ] && err_has 'root 5 is not a rank of 2'; then
            ok "coll-perf under --agent: a root outside the agent's world size is refused"
        else
            bad "coll-perf -r 5 under --agent (rc=$rc)"
        fi
    fi
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
