#!/usr/bin/env bash
# bench/ab.sh: two builds of kcoll side by side in one run (A/B), to show that a change costs
# nothing (or what it costs). Each measurement runs build A, then build B, then A again ... so
# that the machine's drift hits both alike; the best of the rounds is kept per side.
#
# usage: bench/ab.sh --a DIR --b DIR [options]
#   --a DIR, --b DIR   build directories (each with tools/coll-run and tools/coll-perf), e.g. a
#                      Release build of the old commit and one of the new
#   --ranks "2 4"      rank counts (default "2 4")
#   --colls "..."      collectives (default: all_reduce all_gather reduce_scatter broadcast reduce
#                      all_to_all sendrecv); "none": only the 8-byte all_reduce latency
#   --transport T      socket (COLL_SHM_DISABLE=1, default), shm, or both
#   --rounds N         alternations per measurement (default 3)
#   --iters N          timed iterations per size (default 20); sizes 1M, 16M, 64M
#   --lat-iters N      timed iterations of the 8-byte all_reduce (default 1000)
#   --out FILE         also write the table as markdown to FILE
# Output: one row per (transport, ranks, collective, size): A's and B's bus bandwidth in GB/s
# (8 B: latency in us) and B/A. Exit status 1 when a run failed.
set -uo pipefail

A= B= RANKS="2 4" TRANSPORT=socket ROUNDS=3 ITERS=20 LAT_ITERS=1000 OUTMD=
COLLS="all_reduce all_gather reduce_scatter broadcast reduce all_to_all sendrecv"
die() {
    echo "ab.sh: $*" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
    --a) A=$(realpath -m "${2:?}"); shift ;;
    --b) B=$(realpath -m "${2:?}"); shift ;;
    --ranks) RANKS=${2:?}; shift ;;
    --colls) COLLS=${2:?}; shift ;;
    --transport) TRANSPORT=${2:?}; shift ;;
    --rounds) ROUNDS=${2:?}; shift ;;
    --iters) ITERS=${2:?}; shift ;;
    --lat-iters) LAT_ITERS=${2:?}; shift ;;
    --out) OUTMD=${2:?}; shift ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
    shift
done
[ -n "$A" ] && [ -n "$B" ] || die "--a and --b are required"
for d in "$A" "$B"; do
    [ -x "$d/tools/coll-run" ] && [ -x "$d/tools/coll-perf" ] || die "$d: no tools/coll-run or coll-perf"
done
case "$TRANSPORT" in
socket) TPS="socket" ;; shm) TPS="shm" ;; both) TPS="socket shm" ;;
*) die "--transport is socket, shm or both" ;;
esac

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
RES=$TMP/results.tsv
failed=0

# run BUILD TRANSPORT RANKS ARGS...: the coll-perf rows as "size<TAB>value" (busbw or time)
run() {
    local dir=$1 tp=$2 n=$3
    shift 3
    local shm=1
    [ "$tp" = shm ] && shm=0
    if ! env COLL_SHM_DISABLE=$shm COLL_SOCKET_IFNAME=lo timeout 600 "$dir/tools/coll-run" -n "$n" \
        "$dir/tools/coll-perf" "$@" >"$TMP/log" 2>&1; then
        echo "ab.sh: failed: $dir $tp n=$n $*" >&2
        tail -n 5 "$TMP/log" >&2
        return 1
    fi
    # coll-perf rows: size count type redop root, then time algbw busbw #wrong out of place,
    # then in place (N/A for the placement not measured)
    awk '/^\[rank 0\] +[0-9]/ { sub(/^\[rank 0\] +/, "");
        if ($6 == "N/A") print $1 "\t" $10 "\t" $12; else print $1 "\t" $6 "\t" $8 }' "$TMP/log"
}

placement() { [ "$1" = broadcast ] && echo in || echo out; }

for tp in $TPS; do
    for n in $RANKS; do
        for coll in ${COLLS/none/} lat; do
            for r in $(seq 1 "$ROUNDS"); do
                for side in A B; do
                    dir=$A
                    [ $side = B ] && dir=$B
                    if [ "$coll" = lat ]; then
                        args=(-C all_reduce -b 8 -e 8 -w 100 -n "$LAT_ITERS" -d float32 -o sum -z out)
                    else
                        args=(-C "$coll" -b 1M -e 64M -f 4 -w 5 -n "$ITERS" -d float32 -o sum
                            -z "$(placement "$coll")")
                    fi
                    if out=$(run "$dir" "$tp" "$n" "${args[@]}"); then
                        while IFS=$'\t' read -r size time busbw; do
                            [ "$coll" = lat ] && [ "$size" != 8 ] && continue
                            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tp" "$n" "$coll" "$size" \
                                "$side" "$time" "$busbw" >>"$RES"
                        done <<<"$out"
                    else
                        failed=1
                    fi
                done
            done
        done
    done
done

# best of the rounds: highest busbw, lowest time (latency rows)
awk -F'\t' -v md="${OUTMD:+1}" '
{
    k = $1 SUBSEP $2 SUBSEP $3 SUBSEP $4
    if (!(k in seen)) { seen[k] = 1; order[++nk] = k }
    v = ($3 == "lat") ? $6 : $7
    kk = k SUBSEP $5
    if (!(kk in best) || ($3 == "lat" ? v < best[kk] : v > best[kk])) best[kk] = v
}
END {
    printf "| transport | ranks | collective | bytes | A | B | B/A |\n| --- | --- | --- | --- | --- | --- | --- |\n"
    for (i = 1; i <= nk; i++) {
        split(order[i], f, SUBSEP)
        a = best[order[i] SUBSEP "A"]; b = best[order[i] SUBSEP "B"]
        unit = (f[3] == "lat") ? " us" : " GB/s"
        ratio = (a > 0 && b > 0) ? sprintf("%.3f", b / a) : "n/a"
        printf "| %s | %s | %s | %s | %s%s | %s%s | %s |\n", f[1], f[2], f[3] == "lat" ? "all_reduce (latency)" : f[3], f[4], a, unit, b, unit, ratio
    }
}' "$RES" | tee "$TMP/table.md"
[ -n "$OUTMD" ] && cp "$TMP/table.md" "$OUTMD"
exit $failed
