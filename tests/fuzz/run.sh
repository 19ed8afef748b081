#!/usr/bin/env bash
# Run every libFuzzer target for a fixed time on a scratch copy of its corpus (the checked-in
# corpus is only read); any crash, leak, sanitizer report, timeout or broken invariant fails the
# run. Crash reproducers land in the scratch directory: fix the bug, then copy the reproducer into
# tests/fuzz/corpus/<target>/ so that the fuzz_replay_* tests keep checking it.
#   tests/fuzz/run.sh <build dir configured with CC=clang -DCOLL_FUZZ=ON> [seconds per target]
#                     [target...]
# CI (scripts/test.sh) gives each target KCOLL_FUZZ_SECONDS (20); scripts/fuzz.sh runs longer.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=targets.sh
. "$HERE/targets.sh"
BUILD=${1:?usage: run.sh <build dir> [seconds] [target...]}
SECS=${2:-20}
shift $(($# >= 2 ? 2 : $#))
[ $# -gt 0 ] && FUZZ_TARGETS=("$@")
OUT=$(mktemp -d /tmp/kcoll-fuzz.XXXXXX)
status=0
for t in "${FUZZ_TARGETS[@]}"; do
    bin="$BUILD/tests/fuzz/fuzz_$t"
    [ -x "$bin" ] || {
        echo "missing $bin (configure with CC=clang -DCOLL_FUZZ=ON and build)"
        exit 2
    }
    mkdir -p "$OUT/$t/corpus" "$OUT/$t/artifacts"
    cp "$HERE/corpus/$t/"* "$OUT/$t/corpus/"
    echo "=== fuzz_$t for $SECS s"
    # -timeout: one input may take at most 30 s (a hang is a failure; generous for a loaded
    # 2-core machine, where one input of fuzz_agent_server once took over 10 s); stdin is /dev/null so
    # that no target can wait on a terminal
    if ! "$bin" -max_total_time="$SECS" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$OUT/$t/artifacts/" "$OUT/$t/corpus" </dev/null >"$OUT/$t/log" 2>&1; then
        status=1
        echo "fuzz_$t FOUND A FAILURE:"
        grep -E "ERROR|invariant|SUMMARY|Test unit written" "$OUT/$t/log" | head -20
    fi
    grep -E "^#[0-9]+.*(DONE|pulse)|stat::number_of_executed_units|stat::new_units_added|cov:" \
        "$OUT/$t/log" | tail -3
    echo "corpus: $(find "$OUT/$t/corpus" -type f | wc -l) inputs," \
        "artifacts: $(find "$OUT/$t/artifacts" -type f | wc -l)"
done
echo "logs, corpora and artifacts: $OUT"
exit $status
