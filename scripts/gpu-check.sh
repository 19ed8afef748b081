#!/usr/bin/env bash
# Everything kcoll checks on a GPU, in one short run (a lent device machine, or any CUDA host):
# a Release build for this GPU, coll-perf on device buffers (2 ranks sharing GPU 0, the plugin
# found beside libcoll as in a pod), every ctest of label gpu (the device path, the frameworks
# on kcoll's libnccl.so.2), then the CUDA kernels' own test within what time is left.
#   scripts/gpu-check.sh [OUTDIR] [NCCL_INCLUDE_DIR]
# Logs go to OUTDIR (default ./gpu-check-out); the tail of each is printed.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$ROOT/gpu-check-out}
NCCL_INC=${2:-}
B=${KCOLL_GPU_BUILD:-/tmp/kcoll-gpu-build}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
start=$SECONDS
stage() { echo "==== $1 ($((SECONDS - start)) s)"; }
stage "GPU"
nvidia-smi -L || true
stage "configure"
args=(-DCMAKE_BUILD_TYPE=Release -DCOLL_WERROR=OFF -DPython3_EXECUTABLE="$(command -v python3)")
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d .)
[ -n "$arch" ] && args+=(-DCMAKE_CUDA_ARCHITECTURES="$arch")
[ -n "$NCCL_INC" ] && args+=(-DCOLL_NCCL_INCLUDE_DIR="$NCCL_INC")
cmake -S "$ROOT" -B "$B" -G Ninja "${args[@]}" >"$OUT/cmake.log" 2>&1 || {
    tail -n 30 "$OUT/cmake.log"
    exit 1
}
grep -E "NCCL face|CUDA" "$OUT/cmake.log" | head -n 5
stage "build"
# only what the GPU checks run (the whole tree takes minutes more)
targets=(coll coll_cuda coll-run coll-perf test_device test_cuda_kernels cuda-kernel-bench)
grep -q "NCCL face: libnccl.so.2 against" "$OUT/cmake.log" && targets+=(kcoll_nccl)
cmake --build "$B" -j"$(nproc)" --target "${targets[@]}" >"$OUT/build.log" 2>&1 || {
    grep -m 20 -B 2 -A 6 "error" "$OUT/build.log"
    exit 1
}
cd "$B" || exit 1
stage "coll-perf --device cuda, 2 ranks on GPU 0, no COLL_CUDA_PLUGIN"
COLL_SOCKET_IFNAME=lo timeout 120 tools/coll-run -n 2 tools/coll-perf --device cuda \
    -C all -b 8 -e 64M -f 8 -n 20 -w 3 \
    >"$OUT/perf_device.log" 2>&1
echo "exit $?"
grep -v "^\[rank 1\]" "$OUT/perf_device.log" | tail -n 40
# The hang of the first H200 run (docs/gpu.md; likeliest cause: lazy kernel loading, fixed by
# loading the kernels before the first gate): stream order with inline programs (the default)
# without and with CUDA IPC, then with each gate, 40 s each at most, so that one run tells which
# part holds the stream if it still hangs.
for v in "COLL_CUDA_GATE=inline COLL_CUDA_IPC=0" "COLL_CUDA_GATE=inline" "COLL_CUDA_GATE=memop" \
    "COLL_CUDA_GATE=hostfunc"; do
    stage "dev_cuda_order with $v"
    env $v COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=COLL timeout 40 ctest -R '^dev_cuda_order$' \
        --output-on-failure >"$OUT/order_${v//[ =]/_}.log" 2>&1
    echo "exit $?"
    grep -E "Passed|Failed|Timeout|stream memory|WARN" "$OUT/order_${v//[ =]/_}.log" | head -n 8
done
# The hardware-queue risk (docs/gpu.md): with one queue, inline programs must give the sums.
stage "dev_cuda_stall (CUDA_DEVICE_MAX_CONNECTIONS=1)"
timeout 60 ctest -R '^dev_cuda_stall$' -V >"$OUT/stall.log" 2>&1
echo "exit $?"
grep -E "Passed|Failed|Timeout|no stall|stalled with" "$OUT/stall.log" | cut -c1-300 | head -n 6
stage "ctest -L gpu (without the kernel test)"
timeout "${KCOLL_GPU_CTEST_S:-330}" ctest -L gpu -E 'test_cuda_kernels|dev_cuda_stall' --output-on-failure -j1 >"$OUT/ctest_gpu.log" 2>&1
echo "exit $?"
grep -E "Test +#|tests passed|SKIPPED|ok   |FAIL|time all|busbw" "$OUT/ctest_gpu.log" | tail -n 60
left=$((${KCOLL_GPU_BUDGET_S:-540} - (SECONDS - start)))
stage "test_cuda_kernels (${left} s left)"
if [ "$left" -gt 30 ]; then
    timeout "$left" ctest -R test_cuda_kernels --output-on-failure >"$OUT/kernels.log" 2>&1
    echo "exit $?"
    tail -n 15 "$OUT/kernels.log"
fi
stage "done"
