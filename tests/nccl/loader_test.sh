#!/usr/bin/env bash
# A program linked with NVIDIA's libnccl.so.2 runs on kcoll's, as a user would switch: with
# LD_PRELOAD, and with LD_LIBRARY_PATH; NCCL_DEBUG=VERSION prints kcoll's banner, into the file
# NCCL_DEBUG_FILE names when it is set. A dlopen("libnccl.so") (PaddlePaddle, TensorRT-LLM) gets
# kcoll's library too: libnccl.so.2 loads libnccl-alias.so from its own folder (preloaded alone,
# as a user would), the webhook preloads both, and with LD_LIBRARY_PATH the libnccl.so link
# beside it answers. A copy of libnccl.so.2 with no alias beside it lets that dlopen load
# NVIDIA's (the control), and kcoll then warns at the next communicator that another NCCL is
# loaded.
#   loader_test.sh PROGRAM KCOLL_LIBNCCL [NVIDIA_LIBNCCL]
set -uo pipefail
prog=$1 lib=$2 real=${3:-}
dir=$(dirname "$lib")
# A sanitizer build of the library needs its runtime loaded first (the program is not built with it)
asan=$(ldd "$lib" | awk '/libasan/ {print $3}')
preload="${asan:+$asan }$lib $dir/libnccl-alias.so"
realdir=$(dirname "${real:-/nonexistent/x}")
status=0
for how in preload preload-alone path; do
    if [ $how = preload ]; then
        out=$(NCCL_DEBUG=VERSION LD_PRELOAD="$preload" LD_LIBRARY_PATH="$realdir" "$prog" dlopen 2>&1)
    elif [ $how = preload-alone ]; then
        out=$(NCCL_DEBUG=VERSION LD_PRELOAD="${asan:+$asan }$lib" LD_LIBRARY_PATH="$realdir" "$prog" dlopen 2>&1)
    else
        out=$(NCCL_DEBUG=VERSION LD_LIBRARY_PATH="$dir:$realdir" "$prog" dlopen 2>&1)
    fi
    rc=$?
    if [ $rc = 0 ] && grep -q "^NCCL version .*+kcoll" <<<"$out" && grep -q "all_reduce on 1 rank: 2" <<<"$out" &&
        grep -q "dlopen(libnccl.so): the same library" <<<"$out" && ! grep -q "another NCCL is loaded" <<<"$out"; then
        echo "ok ($how): $(head -n 2 <<<"$out" | tr '\n' ' ')"
    else
        echo "FAIL ($how, exit $rc):"
        sed 's/^/  /' <<<"$out"
        status=1
    fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the control: a copy of libnccl.so.2 with no alias beside it, so dlopen("libnccl.so") finds
# NVIDIA's beside kcoll's preloaded one
if [ -e "$realdir/libnccl.so" ]; then
    mkdir "$tmp/alone" && cp "$lib" "$tmp/alone/libnccl.so.2"
    out=$(LD_PRELOAD="${asan:+$asan }$tmp/alone/libnccl.so.2" LD_LIBRARY_PATH="$realdir" "$prog" dlopen 2>&1)
    if grep -q "dlopen(libnccl.so): another NCCL" <<<"$out" &&
        grep -q "kcoll NCCL WARN another NCCL is loaded in this process beside kcoll's" <<<"$out"; then
        echo "ok (control: a libnccl.so.2 with no alias beside it, dlopen(libnccl.so) loads $realdir/libnccl.so; kcoll warns)"
    else
        echo "FAIL (control: the alias made no difference):"
        sed 's/^/  /' <<<"$out"
        status=1
    fi
else
    echo "control skipped: no NVIDIA libnccl.so in $realdir"
fi
# NCCL_DEBUG_FILE: the banner and kcoll's lines go to that file (%p: the pid), not to stderr
out=$(NCCL_DEBUG=VERSION NCCL_DEBUG_FILE="$tmp/nccl.%p.log" LD_PRELOAD="$preload" "$prog" 2>&1)
rc=$?
log=$(cat "$tmp"/nccl.[0-9]*.log 2>&1)
if [ $rc = 0 ] && grep -q "all_reduce on 1 rank: 2" <<<"$out" && ! grep -q "NCCL version" <<<"$out" &&
    grep -q "^NCCL version .*+kcoll" <<<"$log"; then
    echo "ok (NCCL_DEBUG_FILE): $(head -n 1 <<<"$log")"
else
    echo "FAIL (NCCL_DEBUG_FILE, exit $rc): output:"
    sed 's/^/  /' <<<"$out"
    echo "  file:"
    sed 's/^/  /' <<<"$log"
    status=1
fi
exit $status
