#!/usr/bin/env bash
# Build the soft-RoCE guest image, or reuse the one cached in <out-dir>:
#   guest-image.sh <out-dir>
# The guest is a Debian 12 kernel (the linux-image-6.1.0-*-amd64 package that scripts/setup.sh
# downloads into .deps/guest/, or the one KCOLL_GUEST_KERNEL_DEB names) with a minimal initramfs:
# the static busybox of this machine, the kernel modules the guest needs (rdma_rxe and what it
# depends on, virtio networking, 9p) and tests/ib-rxe/guest-init as /init. The guest's userland
# (rdma-core 44, perftest, iproute2, the kcoll build) is this machine's own root file system,
# shared read-only over 9p (see guest-init), so the image holds no copy of it.
# Prints the image directory (vmlinuz, initrd.gz) on success. Exit 77 with "SKIPPED: <why>"
# when something it needs is missing, 1 on a real failure.
set -euo pipefail

OUT=${1:?usage: guest-image.sh <out-dir>}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MODULES="crc32_generic rdma_rxe ib_uverbs dummy virtio_pci virtio_net 9pnet_virtio 9p"

skip() {
    echo "SKIPPED: $*"
    exit 77
}

BUSYBOX=$(command -v busybox || true)
[ -n "$BUSYBOX" ] || skip "busybox is not installed (apt-get install busybox-static; scripts/setup.sh does)"
if ! grep -q "not a dynamic" < <(LC_ALL=C ldd "$BUSYBOX" 2>&1); then
    skip "$BUSYBOX is not statically linked (install busybox-static; scripts/setup.sh does)"
fi

DEB=${KCOLL_GUEST_KERNEL_DEB:-}
if [ -z "$DEB" ]; then
    DEB=$(ls -1 "$ROOT"/.deps/guest/linux-image-6.1.0-*-amd64_*.deb 2>/dev/null | sort -V | tail -1 || true)
fi
[ -n "$DEB" ] && [ -f "$DEB" ] ||
    skip "no guest kernel package: run scripts/setup.sh (it downloads linux-image-6.1.0-*-amd64 into .deps/guest/), or set KCOLL_GUEST_KERNEL_DEB"

KEY=$( (basename "$DEB"; stat -c %s "$DEB"; cat "$HERE/guest-image.sh" "$HERE/guest-init"; echo "$MODULES") | sha256sum | cut -c1-16)
if [ -f "$OUT/image.key" ] && [ "$(cat "$OUT/image.key")" = "$KEY" ] && [ -f "$OUT/vmlinuz" ] &&
    [ -f "$OUT/initrd.gz" ]; then
    echo "$OUT"
    exit 0
fi

mkdir -p "$OUT"
WORK=$(mktemp -d "$OUT/build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
dpkg-deb -x "$DEB" "$WORK/pkg"
KVER=$(ls "$WORK/pkg/lib/modules")
[ -n "$KVER" ] && [ -f "$WORK/pkg/boot/vmlinuz-$KVER" ] || {
    echo "guest-image: $DEB holds no kernel image" >&2
    exit 1
}
# modules.dep of the whole package, then the closure of what the guest loads
"$BUSYBOX" depmod -b "$WORK/pkg" "$KVER"
MODDIR="$WORK/pkg/lib/modules/$KVER"
declare -A seen=()
order=()
add_mod() { # path relative to MODDIR; dependencies first
    local rel=$1 dep
    [ -z "${seen[$rel]:-}" ] || return 0
    seen[$rel]=1
    for dep in $(awk -v m="$rel:" '$1 == m { for (i = 2; i <= NF; i++) print $i }' "$MODDIR/modules.dep"); do
        add_mod "$dep"
    done
    order+=("$rel")
}
for m in $MODULES; do
    rel=$(awk -F: -v m="/$m.ko" 'substr($1, length($1) - length(m) + 1) == m { print $1; exit }' "$MODDIR/modules.dep")
    [ -n "$rel" ] || {
        echo "guest-image: module $m is not in $DEB" >&2
        exit 1
    }
    add_mod "$rel"
done

I="$WORK/initrd"
mkdir -p "$I"/{bin,dev,proc,sys,host,lib/modules}
cp "$BUSYBOX" "$I/bin/busybox"
cp "$HERE/guest-init" "$I/init"
chmod 755 "$I/init"
for rel in "${order[@]}"; do
    echo "/lib/modules/${rel##*/}" >>"$I/lib/modules/load.list"
    cp "$MODDIR/$rel" "$I/lib/modules/"
done
(cd "$I" && find . | "$BUSYBOX" cpio -o -H newc 2>/dev/null | gzip -1) >"$WORK/initrd.gz"
cp "$WORK/pkg/boot/vmlinuz-$KVER" "$WORK/vmlinuz"
mv -f "$WORK/initrd.gz" "$WORK/vmlinuz" "$OUT/"
echo "$KVER" >"$OUT/kernel.version"
echo "$KEY" >"$OUT/image.key"
echo "$OUT"
