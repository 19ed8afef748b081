#!/bin/sh
# coll-perf --device cuda through coll-run on 2 ranks, every collective checked: passes when every
# result is right (#wrong 0) and the buffers were GPU memory. Exit 77 (skipped) when the plugin
# finds no usable GPU. Further arguments go to coll-perf (-G N: the timed calls in a CUDA graph).
# Usage: coll_perf_device.sh COLL_RUN COLL_PERF MAXBYTES [COLL_PERF_ARGS...]
run=$1
perf=$2
max=$3
shift 3
out=$("$run" -n 2 -- "$perf" --device cuda -b 8 -e "$max" -f 8 -n 3 -w 1 -C all "$@" 2>&1)
rc=$?
echo "$out"
if [ "$rc" -ne 0 ]; then
    if echo "$out" | grep -q 'no usable GPU'; then
        echo "SKIPPED: no usable GPU"
        exit 77
    fi
    echo "FAIL: coll-perf exited with $rc"
    exit 1
fi
echo "$out" | grep -q 'buffers: GPU memory' || { echo "FAIL: the buffers were not GPU memory"; exit 1; }
echo "$out" | grep -q 'Out of bounds values : 0 OK' || { echo "FAIL: wrong results"; exit 1; }
case " $* " in
*" -G "*) echo "$out" | grep -q '# CUDA graphs: the 3 timed calls' || { echo "FAIL: no CUDA graphs"; exit 1; } ;;
esac
echo "PASS"
