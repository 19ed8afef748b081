#!/usr/bin/env bash
# bench/run.sh: kcoll (coll-perf under coll-run) side by side with Open MPI over loopback TCP on
# this machine, plus the single-stream loopback TCP throughput (the physical limit).
#
# usage: bench/run.sh [options]
#   --build-dir DIR    where kcoll and the bench tools are built (default: build-perf)
#   --ranks "2 4"      rank counts to compare (default "2 4")
#   --repeat N         run the whole suite N times, keep the best figure of each (default 2)
#   --warmup N         warm-up iterations per size (default 5)
#   --iters N          timed iterations per size (default 20)
#   --lat-iters N      timed iterations of the 8-byte all-reduce (default 1000)
#   --timeout S        limit for each single measurement in seconds (default 300)
#   --markdown FILE    also write the comparison as a markdown table to FILE
#   --out DIR          keep raw logs here (default: BUILD_DIR/bench-results/DATE)
#   --no-kcoll         measure only Open MPI and TCP (kcoll columns read n/a)
#   --kcoll-shm        also measure kcoll over its shared-memory transport (an extra column,
#                      for information: the comparison itself is TCP against TCP)
#   --no-build         use the binaries already in BUILD_DIR
#   --max-load L       before each round wait (up to 15 min) for the 1-minute load average to
#                      drop below L; other work on the machine disturbs the figures
#
# Both sides use loopback TCP: Open MPI is forced off shared memory (pml ob1, btl self,tcp over lo,
# coll ^sm) and kcoll runs with COLL_SHM_DISABLE=1 (its ranks on one host would otherwise talk
# through shared memory). kcoll runs out of place, as the MPI benchmark does, except broadcast:
# MPI_Bcast has one buffer, so kcoll's broadcast is measured in place too.
# Exit status: 0 when every measurement ran; 1 when one failed or timed out; 2 for bad usage or
# a missing prerequisite.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=$REPO/build-perf
RANKS="2 4"
REPEAT=2
WARMUP=5
ITERS=20
LAT_ITERS=1000
TIMEOUT=300
MARKDOWN=
OUT=
DO_KCOLL=1
DO_SHM=0
DO_BUILD=1
MAX_LOAD=
COLLS="all_reduce all_gather reduce_scatter broadcast reduce all_to_all sendrecv"
SIZES="1048576 16777216 67108864"

die() {
    echo "run.sh: $*" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) BUILD_DIR=$(realpath -m "${2:?}"); shift ;;
    --ranks) RANKS=${2:?}; shift ;;
    --repeat) REPEAT=${2:?}; shift ;;
    --warmup) WARMUP=${2:?}; shift ;;
    --iters) ITERS=${2:?}; shift ;;
    --lat-iters) LAT_ITERS=${2:?}; shift ;;
    --timeout) TIMEOUT=${2:?}; shift ;;
    --markdown) MARKDOWN=$(realpath -m "${2:?}"); shift ;;
    --out) OUT=$(realpath -m "${2:?}"); shift ;;
    --no-kcoll) DO_KCOLL=0 ;;
    --kcoll-shm) DO_SHM=1 ;;
    --no-build) DO_BUILD=0 ;;
    --max-load) MAX_LOAD=${2:?}; shift ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
    shift
done
for v in REPEAT WARMUP ITERS LAT_ITERS TIMEOUT; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "--$(echo "$v" | tr 'A-Z_' 'a-z-') needs a number"
done
[ -n "$OUT" ] || OUT=$BUILD_DIR/bench-results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT" || die "cannot create $OUT"

# ---- prerequisites and build ----
MPICC=$(command -v mpicc.openmpi) ||
    die "mpicc.openmpi not found: install Open MPI (apt-get install -y openmpi-bin libopenmpi-dev; scripts/setup.sh does it)"
MPIRUN=$(command -v mpirun.openmpi) ||
    die "mpirun.openmpi not found: install openmpi-bin (scripts/setup.sh does it)"
CC=${CC:-cc}
BIN=$BUILD_DIR/bench
mkdir -p "$BIN"
if [ "$DO_BUILD" = 1 ]; then
    echo "== building bench tools into $BIN"
    "$CC" -O2 -Wall -Wextra -o "$BIN/tcp_stream" "$REPO/bench/tcp_stream.c" ||
        die "cannot build bench/tcp_stream.c"
    "$MPICC" -O2 -Wall -Wextra -o "$BIN/mpi_coll_bench" "$REPO/bench/mpi_coll_bench.c" ||
        die "cannot build bench/mpi_coll_bench.c with $MPICC"
    if [ "$DO_KCOLL" = 1 ]; then
        echo "== building kcoll (Release) in $BUILD_DIR"
        if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
            cmake -S "$REPO" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 ||
                die "cmake configure failed, see $OUT/cmake.log"
        fi
        cmake --build "$BUILD_DIR" --target coll-perf coll-run -j2 >"$OUT/build.log" 2>&1 ||
            die "kcoll build failed (tail of $OUT/build.log below; --no-kcoll measures MPI and TCP only)
$(tail -n 15 "$OUT/build.log")"
    fi
fi
for f in "$BIN/tcp_stream" "$BIN/mpi_coll_bench"; do
    [ -x "$f" ] || die "$f is missing (run without --no-build)"
done
COLL_RUN=$BUILD_DIR/tools/coll-run
COLL_PERF=$BUILD_DIR/tools/coll-perf
if [ "$DO_KCOLL" = 1 ]; then
    [ -x "$COLL_RUN" ] && [ -x "$COLL_PERF" ] || die "$COLL_RUN or $COLL_PERF is missing"
fi

MPI_ARGS=(--oversubscribe --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo
    --mca oob_tcp_if_include lo --mca coll ^sm --mca btl_base_warn_component_unused 0)
[ "$(id -u)" = 0 ] && MPI_ARGS=(--allow-run-as-root "${MPI_ARGS[@]}")

RESULTS=$OUT/results.tsv # impl rep nranks collective size time_us busbw
: >"$RESULTS"
FAILED=0

# run_one NAME CMD...: run with a timeout, log to $OUT/NAME.log
run_one() {
    local name=$1
    shift
    echo "   $name: $*" >>"$OUT/commands.txt"
    timeout -k 10 "$TIMEOUT" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then
        FAILED=1
        if [ $rc = 124 ] || [ $rc = 137 ]; then
            echo "   FAILED: $name timed out after ${TIMEOUT}s (log $OUT/$name.log)" >&2
        else
            echo "   FAILED: $name exited $rc (log $OUT/$name.log):" >&2
            tail -n 5 "$OUT/$name.log" | sed 's/^/      /' >&2
        fi
        return 1
    fi
    return 0
}

# collect LOG IMPL REP NRANKS [in]: append the out-of-place rows (or, with "in", the in-place
# rows) of a coll-perf-format log
collect() {
    sed -e 's/^\[rank [0-9]*\] //' "$1" | awk -v impl="$2" -v rep="$3" -v n="$4" -v inp="${5:-}" '
        /^# Collective:/ { coll = $3; next }
        /^#/ { next }
        inp != "in" && NF >= 9 && $1 ~ /^[0-9]+$/ && $8 ~ /^[0-9.]+$/ {
            print impl "\t" rep "\t" n "\t" coll "\t" $1 "\t" $6 "\t" $8
        }
        inp == "in" && NF >= 13 && $1 ~ /^[0-9]+$/ && $12 ~ /^[0-9.]+$/ {
            print impl "\t" rep "\t" n "\t" coll "\t" $1 "\t" $10 "\t" $12
        }' >>"$RESULTS"
}

# placement COLL: kcoll's placement compared with MPI. MPI_Bcast has one buffer (in place), so
# kcoll's broadcast is measured in place; an out-of-place kcoll broadcast also copies the root's
# input to its output, which MPI never does. Every other collective: out of place, as the MPI
# benchmark.
placement() { [ "$1" = broadcast ] && echo in || echo out; }

BW_ARGS=(-b 1M -e 64M -f 4 -w "$WARMUP" -n "$ITERS")
LAT_ARGS=(-C all_reduce -b 8 -e 8 -w 100 -n "$LAT_ITERS")

echo "== results and logs in $OUT"
echo "== load before: $(uptime)" | tee "$OUT/load.txt"
# wait_load (bench/common.sh): wait for the load average to drop below MAX_LOAD
. "$REPO/bench/common.sh"

for rep in $(seq 1 "$REPEAT"); do
    wait_load
    echo "== round $rep of $REPEAT (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$OUT/load.txt"
    for ws in 262144 1048576 4194304; do
        if run_one "tcp-r$rep-w$ws" "$BIN/tcp_stream" -t 2.5 -s "$ws" -q; then
            echo -e "tcp\t$rep\t1\ttcp_stream\t$ws\t0\t$(tail -n 1 "$OUT/tcp-r$rep-w$ws.log")" >>"$RESULTS"
        fi
    done
    for n in $RANKS; do
        for coll in $COLLS; do
            name=ompi-r$rep-n$n-$coll
            run_one "$name" "$MPIRUN" "${MPI_ARGS[@]}" -n "$n" "$BIN/mpi_coll_bench" -C "$coll" \
                "${BW_ARGS[@]}" && collect "$OUT/$name.log" ompi "$rep" "$n"
            if [ "$DO_KCOLL" = 1 ]; then
                name=kcoll-r$rep-n$n-$coll
                run_one "$name" env COLL_SHM_DISABLE=1 "$COLL_RUN" -n "$n" "$COLL_PERF" -C "$coll" \
                    -d float32 -o sum -z "$(placement "$coll")" "${BW_ARGS[@]}" &&
                    collect "$OUT/$name.log" kcoll "$rep" "$n" "$(placement "$coll")"
            fi
            if [ "$DO_KCOLL" = 1 ] && [ "$DO_SHM" = 1 ]; then
                name=kshm-r$rep-n$n-$coll
                run_one "$name" env COLL_SHM_DISABLE=0 "$COLL_RUN" -n "$n" "$COLL_PERF" -C "$coll" \
                    -d float32 -o sum -z "$(placement "$coll")" "${BW_ARGS[@]}" &&
                    collect "$OUT/$name.log" kshm "$rep" "$n" "$(placement "$coll")"
            fi
        done
        name=ompi-r$rep-n$n-lat
        run_one "$name" "$MPIRUN" "${MPI_ARGS[@]}" -n "$n" "$BIN/mpi_coll_bench" "${LAT_ARGS[@]}" &&
            collect "$OUT/$name.log" ompi "$rep" "$n"
        if [ "$DO_KCOLL" = 1 ]; then
            name=kcoll-r$rep-n$n-lat
            run_one "$name" env COLL_SHM_DISABLE=1 "$COLL_RUN" -n "$n" "$COLL_PERF" "${LAT_ARGS[@]}" \
                -d float32 -o sum -z out && collect "$OUT/$name.log" kcoll "$rep" "$n"
        fi
        if [ "$DO_KCOLL" = 1 ] && [ "$DO_SHM" = 1 ]; then
            name=kshm-r$rep-n$n-lat
            run_one "$name" env COLL_SHM_DISABLE=0 "$COLL_RUN" -n "$n" "$COLL_PERF" "${LAT_ARGS[@]}" \
                -d float32 -o sum -z out && collect "$OUT/$name.log" kshm "$rep" "$n"
        fi
    done
done
echo "== load after: $(uptime)" | tee -a "$OUT/load.txt"

# ---- comparison (best of the rounds: highest busbw, lowest latency) ----
report() { # $1 = text or markdown
    awk -F'\t' -v fmt="$1" -v ranks="$RANKS" -v colls="$COLLS" -v sizes="$SIZES" '
    function best_bw(k) { return (k in bw) ? sprintf("%.2f", bw[k]) : "n/a" }
    function ratio(a, b) { return (a in bw && b in bw && bw[b] > 0) ? sprintf("%.2fx", bw[a] / bw[b]) : "n/a" }
    function human(s) { return s >= 1048576 ? (s / 1048576) " MiB" : s " B" }
    function row(a, b, c, d, e, f, g, h) {
        if (fmt == "markdown") printf("| %s | %s | %s | %s | %s | %s | %s |%s\n", a, b, c, d, e, f, g, shm ? " " h " |" : "")
        else printf("%-16s %5s %9s %12s %12s %8s  %-36s%s\n", a, b, c, d, e, f, g, shm ? " " h : "")
    }
    {
        k = $1 SUBSEP $3 SUBSEP $4 SUBSEP $5
        if (!(k in bw) || $7 + 0 > bw[k]) bw[k] = $7 + 0
        if ($5 == 8 && (!(k in lat) || $6 + 0 < lat[k])) lat[k] = $6 + 0
        if ($1 == "tcp" && $7 + 0 > tcp) tcp = $7 + 0
        if ($1 == "kshm") shm = 1
    }
    END {
        if (fmt == "markdown") {
            row("collective", "ranks", "size", "kcoll busbw (GB/s)", "Open MPI busbw (GB/s)", "ratio", "target", "kcoll shm busbw (GB/s, info)")
            row("---", "---:", "---:", "---:", "---:", "---:", "---", "---:")
        } else {
            printf("single-stream loopback TCP (best write size): %.2f GB/s\n\n", tcp)
            row("collective", "ranks", "size", "kcoll busbw", "OMPI busbw", "ratio", "target", "kcoll shm")
        }
        nr = split(ranks, R, " "); nc = split(colls, C, " "); ns = split(sizes, S, " ")
        for (c = 1; c <= nc; c++) for (r = 1; r <= nr; r++) for (s = 1; s <= ns; s++) {
            coll = C[c]; n = R[r]; size = S[s]
            if (size == 67108864 && coll != "all_reduce") continue
            kk = "kcoll" SUBSEP n SUBSEP coll SUBSEP size
            ko = "ompi" SUBSEP n SUBSEP coll SUBSEP size
            target = "n/a"
            if (kk in bw && ko in bw) {
                if (coll == "all_reduce" && size == 67108864)
                    target = (bw[kk] >= 2 * bw[ko] && bw[kk] >= tcp / 2) ? "met" : "NOT met"
                else
                    target = (bw[kk] >= bw[ko]) ? "met" : "NOT met"
                if (coll == "all_reduce" && size == 67108864)
                    target = target sprintf(" (>= 2x OMPI and >= %.2f)", tcp / 2)
                else
                    target = target " (>= OMPI)"
            }
            row(coll, n, human(size), best_bw(kk), best_bw(ko), ratio(kk, ko), target, best_bw("kshm" SUBSEP n SUBSEP coll SUBSEP size))
        }
        if (fmt == "markdown") {
            print ""
            print "| 8-byte all_reduce latency | ranks | kcoll (us) | Open MPI (us) | target |" (shm ? " kcoll shm (us, info) |" : "")
            print "| --- | ---: | ---: | ---: | --- |" (shm ? " ---: |" : "")
        } else {
            printf("\n%-26s %5s %12s %12s  %-20s%s\n", "8-byte all_reduce latency", "ranks", "kcoll (us)", "OMPI (us)", "target", shm ? " kcoll shm (us)" : "")
        }
        for (r = 1; r <= nr; r++) {
            n = R[r]
            kk = "kcoll" SUBSEP n SUBSEP "all_reduce" SUBSEP 8
            ko = "ompi" SUBSEP n SUBSEP "all_reduce" SUBSEP 8
            kl = (kk in lat) ? sprintf("%.1f", lat[kk]) : "n/a"
            ol = (ko in lat) ? sprintf("%.1f", lat[ko]) : "n/a"
            target = (kk in lat && ko in lat) ? ((lat[kk] <= lat[ko]) ? "met" : "NOT met") " (<= OMPI)" : "n/a"
            ks = "kshm" SUBSEP n SUBSEP "all_reduce" SUBSEP 8
            sl = (ks in lat) ? sprintf("%.1f", lat[ks]) : "n/a"
            if (fmt == "markdown") printf("| all_reduce 8 B | %s | %s | %s | %s |%s\n", n, kl, ol, target, shm ? " " sl " |" : "")
            else printf("%-26s %5s %12s %12s  %-20s%s\n", "all_reduce 8 B", n, kl, ol, target, shm ? " " sl : "")
        }
        if (fmt == "markdown") {
            printf("\nSingle-stream loopback TCP (tcp_stream, best of 256 KiB / 1 MiB / 4 MiB writes): %.2f GB/s\n", tcp)
        }
    }' "$RESULTS"
}

echo
report text | tee "$OUT/comparison.txt"
if [ -n "$MARKDOWN" ]; then
    {
        echo "<!-- generated by bench/run.sh on $(date -u +%Y-%m-%dT%H:%MZ), best of $REPEAT rounds -->"
        report markdown
    } >"$MARKDOWN"
    echo "markdown table written to $MARKDOWN"
fi
if [ "$FAILED" != 0 ]; then
    echo "run.sh: some measurements failed (see above and $OUT)" >&2
    exit 1
fi
exit 0
