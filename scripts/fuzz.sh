#!/usr/bin/env bash
# The long local fuzz run: every fuzz target (or those named) until it has run RUNS inputs
# (default 10 million) or for SECONDS each when a time is given, one after the other, each on a
# scratch copy of its corpus. Prints executions, executions/s and coverage (libFuzzer's cov: and
# ft: figures) per target: the table of docs/security.md's "Fuzzing" section. (To use more cores,
# run one fuzz.sh per group of targets.)
#   scripts/fuzz.sh [--runs N | --seconds S] [target...]
# Builds build-fuzz/ first (CC=clang, COLL_FUZZ=ON, no CUDA). A failure keeps its reproducer in
# the scratch directory printed at the end: fix the bug and copy the file into
# tests/fuzz/corpus/<target>/. CI runs the short version (tests/fuzz/run.sh, 30 s per target).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../tests/fuzz/targets.sh
. "$ROOT/tests/fuzz/targets.sh"
RUNS=10000000
SECS=
while [ $# -gt 0 ]; do
    case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] && FUZZ_TARGETS=("$@")
BUILD="$ROOT/build-fuzz"
generator=()
[ -f "$BUILD/CMakeCache.txt" ] || generator=(-G Ninja)
CC=clang cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCOLL_FUZZ=ON -DCOLL_CUDA=OFF >/dev/null
cmake --build "$BUILD" --parallel "$(nproc)" --target "${FUZZ_TARGETS[@]/#/fuzz_}" >/dev/null

OUT=$(mktemp -d /tmp/kcoll-fuzz-long.XXXXXX)
status=0
limit=(-runs="$RUNS")
[ -n "$SECS" ] && limit=(-max_total_time="$SECS")
printf '%-12s %12s %8s %10s %7s %7s %s\n' target executions seconds exec/s cov ft result
for t in "${FUZZ_TARGETS[@]}"; do
    mkdir -p "$OUT/$t/corpus" "$OUT/$t/artifacts"
    cp "$ROOT/tests/fuzz/corpus/$t/"* "$OUT/$t/corpus/"
    start=$(date +%s.%N)
    result=ok
    if ! "$BUILD/tests/fuzz/fuzz_$t" "${limit[@]}" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/$t/artifacts/" \
        "$OUT/$t/corpus" </dev/null >"$OUT/$t/log" 2>&1; then
        result="FAILED (see $OUT/$t/log)"
        status=1
    fi
    end=$(date +%s.%N)
    log="$OUT/$t/log"
    execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1)
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
    ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | awk '{print $2}')
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.0f", b - a}')
    rate=$(awk -v e="${execs:-0}" -v s="$secs" 'BEGIN {printf "%.0f", (s > 0 ? e / s : 0)}')
    printf '%-12s %12s %8s %10s %7s %7s %s\n' "$t" "${execs:-0}" "$secs" "$rate" "${cov:-0}" \
        "${ft:-0}" "$result"
done
echo "machine: $(nproc) cores, $(uname -m); logs, corpora and artifacts: $OUT"
exit $status
