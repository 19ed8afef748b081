#!/usr/bin/env bash
# Run every libFuzzer target for a while on a scratch copy of its corpus (the checked-in corpus
# is only read). Crash reproducers land in the scratch directory; copy the interesting ones into
# tests/fuzz/corpus/<target>/ so that the fuzz_replay_* tests keep checking them.
#   tests/fuzz/run.sh <build dir configured with CC=clang -DCOLL_FUZZ=ON> [seconds per target]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=${1:?usage: run.sh <build dir> [seconds]}
SECS=${2:-60}
OUT=$(mktemp -d /tmp/kcoll-fuzz.XXXXXX)
status=0
for t in uniqueid wire config agent_ipc nccl_ipc; do
    bin="$BUILD/tests/fuzz/fuzz_$t"
    [ -x "$bin" ] || {
        echo "missing $bin (configure with CC=clang -DCOLL_FUZZ=ON and build)"
        exit 2
    }
    mkdir -p "$OUT/$t/corpus" "$OUT/$t/artifacts"
    cp "$HERE/corpus/$t/"* "$OUT/$t/corpus/"
    echo "=== fuzz_$t for $SECS s"
    if ! "$bin" -max_total_time="$SECS" -print_final_stats=1 -artifact_prefix="$OUT/$t/artifacts/" \
        "$OUT/$t/corpus" >"$OUT/$t/log" 2>&1; then
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
