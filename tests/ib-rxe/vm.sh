# Boot soft-RoCE guests (sourced by ib_rxe_test.sh and bench/ib_rxe_bench.sh).
#   vm_boot <image-dir> <job-dir> <name> <ip/prefix> <mem MiB> <timeout s> [<udp-port-self> <udp-port-peer>]
# starts one guest in the background (its pid in VM_PID) that runs <job-dir>/guest.sh (see
# guest-init) and powers off. With the two UDP ports its virtio NIC is joined to another guest's
# by qemu's UDP socket netdev (127.0.0.1 only); without, the guest has no NIC and guest.sh makes
# a dummy device. qemu runs under TCG (never -enable-kvm: the paravirtualised KVM of some hosts
# hangs stock kernels), its console goes to <job-dir>/<name>.console.
#   vm_wait <pid> <timeout s>  waits for a guest; kills it (and returns 124) at the deadline.
vm_boot() {
    local img=$1 job=$2 name=$3 ip=$4 mem=$5 tmo=$6 self=${7:-} peer=${8:-}
    local net=(-nic none)
    if [ -n "$self" ]; then
        local mac
        mac=$(printf '52:54:00:4b:43:%02x' "$((self % 256))")
        net=(-netdev "socket,id=n0,udp=127.0.0.1:$peer,localaddr=127.0.0.1:$self"
            -device "virtio-net-pci,netdev=n0,mac=$mac")
    fi
    # KCOLL_RXE_TREE: a directory under /tmp or /run (which the guest mounts afresh) that holds
    # the build; shared read-only at the same path
    local tree=() append="console=ttyS0 panic=-1 quiet loglevel=3 kcoll.name=$name kcoll.ip=$ip"
    if [ -n "${KCOLL_RXE_TREE:-}" ]; then
        tree=(-virtfs "local,path=$KCOLL_RXE_TREE,mount_tag=tree,security_model=none,readonly=on,multidevs=remap")
        append="$append kcoll.tree=$KCOLL_RXE_TREE"
    fi
    timeout -k 5 "$tmo" qemu-system-x86_64 -machine q35 -accel tcg,thread=multi -cpu max \
        -smp "${KCOLL_GUEST_CPUS:-2}" -m "$mem" -nographic -no-reboot -monitor none \
        -serial "file:$job/$name.console" \
        -kernel "$img/vmlinuz" -initrd "$img/initrd.gz" \
        -append "$append" "${tree[@]}" \
        -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
        -virtfs "local,path=$job,mount_tag=job,security_model=none" \
        "${net[@]}" </dev/null >"$job/$name.qemu" 2>&1 &
    VM_PID=$!
}

vm_wait() {
    local rc=0
    wait "$1" || rc=$?
    return $rc
}
