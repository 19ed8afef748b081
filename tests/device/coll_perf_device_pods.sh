#!/bin/sh
# coll-perf --device cuda under coll-run --agent with 2 pods of 2 ranks and 2 GPUs per pod (the
# fake GPU with FAKE_GPU_DEVICES=2): local rank r binds GPU r of its pod, as the agent placed it,
# and every result is right. Usage: coll_perf_device_pods.sh COLL_RUN COLL_PERF
run=$1
perf=$2
out=$(FAKE_GPU_DEVICES=2 "$run" --agent --pods 2 --ranks-per-pod 2 --gpus-per-pod 2 -- \
    "$perf" --device cuda -b 8 -e 256K -f 8 -n 2 -w 1 -C all 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: coll-perf exited with $rc"; exit 1; }
fail=0
for r in 0 1 2 3; do
    want=$((r % 2))
    echo "$out" | grep -q "^\[rank $r\] # rank $r: buffers on GPU $want " ||
        { echo "FAIL: rank $r's buffers are not on GPU $want (local rank $want of its pod)"; fail=1; }
    echo "$out" | grep -Eq "Rank +$r Pid +[0-9]+ on .* local $want/2 .* gpu $want$" ||
        { echo "FAIL: coll-perf does not list rank $r on GPU $want"; fail=1; }
done
echo "$out" | grep -q 'Out of bounds values : 0 OK' || { echo "FAIL: wrong results"; fail=1; }
# a pod with fewer GPUs than the process can see: GPU 1 of a 1-GPU machine is refused, named
out=$(FAKE_GPU_DEVICES=1 "$run" --agent --pods 1 --ranks-per-pod 2 --gpus-per-pod 2 -- \
    "$perf" --device cuda -b 8 -e 8 -n 1 -w 0 -C all_reduce 2>&1)
rc=$?
echo "$out" | tail -n 5
if [ "$rc" -eq 0 ] ||
    ! echo "$out" | grep -q "rank 1 (local rank 1 of 2 in pod coll-run-pod-0) is placed on GPU 1"; then
    echo "FAIL: a rank placed on a GPU it cannot use was not refused with its place"
    fail=1
fi
[ "$fail" -eq 0 ] && echo "PASS"
exit "$fail"
