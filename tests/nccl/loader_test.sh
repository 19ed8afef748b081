#!/usr/bin/env bash
# A program linked with NVIDIA's libnccl.so.2 runs on kcoll's, as a user would switch: with
# LD_PRELOAD, and with LD_LIBRARY_PATH; NCCL_DEBUG=VERSION prints kcoll's banner.
#   loader_test.sh PROGRAM KCOLL_LIBNCCL
set -uo pipefail
prog=$1 lib=$2
dir=$(dirname "$lib")
# A sanitizer build of the library needs its runtime loaded first (the program is not built with it)
asan=$(ldd "$lib" | awk '/libasan/ {print $3}')
preload="${asan:+$asan }$lib"
status=0
for how in preload path; do
    if [ $how = preload ]; then
        out=$(NCCL_DEBUG=VERSION LD_PRELOAD="$preload" "$prog" 2>&1)
    else
        out=$(NCCL_DEBUG=VERSION LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$prog" 2>&1)
    fi
    rc=$?
    if [ $rc = 0 ] && grep -q "^NCCL version .*+kcoll" <<<"$out" && grep -q "all_reduce on 1 rank: 2" <<<"$out"; then
        echo "ok ($how): $(head -n 2 <<<"$out" | tr '\n' ' ')"
    else
        echo "FAIL ($how, exit $rc):"
        sed 's/^/  /' <<<"$out"
        status=1
    fi
done
exit $status
