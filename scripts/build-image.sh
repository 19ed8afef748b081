#!/usr/bin/env bash
# Build the CPU-only kcoll agent image from the Dockerfile with buildah (no Docker engine, no
# registry): the base is a Debian 12 minbase root file system made by mmdebstrap from the apt
# mirror, cached as a tarball and imported once as a local image.
#
#   scripts/build-image.sh [--tag IMAGE] [--cache-dir DIR] [--timeout SEC] [--refresh-base]
#                          [--cuda-toolkit DIR [--cuda-arch LIST]]
#
#   --tag IMAGE      image name (default localhost/kcoll-agent:VERSION-cpu, VERSION from
#                    scripts/version.sh; -cuda-local with --cuda-toolkit)
#   --cache-dir DIR  where the base tarball and image.env live (default build-image/)
#   --timeout SEC    deadline of each step: mmdebstrap, buildah bud (default 900)
#   --refresh-base   make the base tarball again (picks up Debian security updates)
#   --cuda-toolkit DIR  CUDA=ON from the same Debian 12 bases, with a CUDA toolkit of this machine
#                    (e.g. /usr/local/cuda-13.0, nvcc and nccl.h) mounted read-only at
#                    /usr/local/cuda in the RUN steps: the CUDA branch of the Dockerfile (kernels,
#                    GPU plugin, NCCL face) where the nvidia/cuda bases cannot be pulled. The
#                    toolkit is not copied into the image (the GPU plugin links cudart statically)
#   --cuda-arch LIST GPU architectures for --cuda-toolkit (default 80;90)
#
# Writes DIR/image.env (IMAGE=, VERSION=, SIZE=, LAYERS=, the seconds of the steps; image-cuda.env
# with --cuda-toolkit) for the image tests and scripts/test.sh's summary. Needs root
# (buildah with chroot isolation, mmdebstrap); scripts/setup.sh installs buildah and mmdebstrap.
# buildah keeps its layer cache in /var/lib/containers/storage: a second run rebuilds only from
# the first changed step (`buildah rmi --prune` reclaims what older builds left).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE_DIR="$ROOT/build-image"
TAG=""
STEP_TIMEOUT=900
REFRESH_BASE=0
CUDA_TOOLKIT=""
CUDA_ARCH="80;90"

log() { echo "build-image: $*"; }
die() {
    echo "build-image: error: $*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case "$1" in
    --tag) TAG=${2:?--tag needs a value}; shift 2 ;;
    --cache-dir) CACHE_DIR=${2:?--cache-dir needs a value}; shift 2 ;;
    --timeout) STEP_TIMEOUT=${2:?--timeout needs a value}; shift 2 ;;
    --refresh-base) REFRESH_BASE=1; shift ;;
    --cuda-toolkit) CUDA_TOOLKIT=${2:?--cuda-toolkit needs a directory}; shift 2 ;;
    --cuda-arch) CUDA_ARCH=${2:?--cuda-arch needs a list}; shift 2 ;;
    -h | --help) sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
done
[[ "$STEP_TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive number of seconds"

[ "$(id -u)" -eq 0 ] || die "needs root (buildah --isolation chroot and mmdebstrap run as root)"
for tool in buildah mmdebstrap timeout sha256sum; do
    command -v "$tool" >/dev/null || die "$tool not found: run scripts/setup.sh"
done

VERSION=$("$ROOT/scripts/version.sh")
cuda_args=(--build-arg CUDA=OFF)
ENV_FILE=image.env
if [ -n "$CUDA_TOOLKIT" ]; then
    [ -x "$CUDA_TOOLKIT/bin/nvcc" ] || die "--cuda-toolkit $CUDA_TOOLKIT has no bin/nvcc"
    CUDA_TOOLKIT=$(cd "$CUDA_TOOLKIT" && pwd -P)
    cuda_args=(--build-arg CUDA=ON --build-arg "CUDA_ARCHITECTURES=$CUDA_ARCH"
        --volume "$CUDA_TOOLKIT:/usr/local/cuda:ro")
    TAG=${TAG:-localhost/kcoll-agent:$VERSION-cuda-local}
    ENV_FILE=image-cuda.env
fi
TAG=${TAG:-localhost/kcoll-agent:$VERSION-cpu}
REVISION=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$REVISION" != unknown ] && [ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null)" ]; then
    REVISION="$REVISION-dirty"
fi
mkdir -p "$CACHE_DIR"
CACHE_DIR=$(cd "$CACHE_DIR" && pwd)
# The base: Debian 12 minbase without manuals, translations and documentation but the copyright
# files (the options go into the image's dpkg configuration, so later apt-get installs keep to
# them too). The tarball's name carries a hash of the options: new options, new tarball.
MMDEBSTRAP_ARGS=(--variant=minbase --format=tar
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-include=/usr/share/locale/locale.alias'
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/info/*')
opts_hash=$(printf '%s\n' "${MMDEBSTRAP_ARGS[@]}" | sha256sum | cut -c1-8)
BASE_TAR="$CACHE_DIR/debian-bookworm-minbase-$opts_hash.tar"
T0=$SECONDS
BASE_SECONDS=0

# ---- 1. the Debian 12 base, cached as a tarball ----
step_start=$SECONDS
if [ "$REFRESH_BASE" = 1 ] || [ ! -s "$BASE_TAR" ]; then
    log "mmdebstrap --variant=minbase bookworm, no manuals, translations, docs (deadline ${STEP_TIMEOUT} s)"
    rm -f "$BASE_TAR.tmp.tar"
    # A fixed SOURCE_DATE_EPOCH makes the tarball bit for bit the same while the mirror serves the
    # same packages: a fresh checkout (CI) gets the same base image name, so buildah's layer cache
    # from earlier builds applies instead of a new base (and a new set of layers) every time.
    SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000} \
        timeout -k 30 "$STEP_TIMEOUT" mmdebstrap --quiet "${MMDEBSTRAP_ARGS[@]}" bookworm \
        "$BASE_TAR.tmp.tar" ||
        die "mmdebstrap failed or ran past ${STEP_TIMEOUT} s (is the Debian mirror reachable?)"
    mv -f "$BASE_TAR.tmp.tar" "$BASE_TAR"
    BASE_SECONDS=$((SECONDS - step_start))
    log "base tarball made in $BASE_SECONDS s ($(du -m "$BASE_TAR" | cut -f1) MiB)"
else
    log "base tarball cached: ${BASE_TAR#"$ROOT"/}"
fi

# ---- 2. the tarball as a local image, named by its hash (a new tarball is a new base) ----
step_start=$SECONDS
base_hash=$(sha256sum "$BASE_TAR" | cut -c1-12)
BASE_IMAGE="localhost/kcoll-debian:12-minbase-$base_hash"
if buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
    log "base image cached: $BASE_IMAGE"
else
    log "importing the base tarball as $BASE_IMAGE"
    ctr=$(buildah from --pull-never scratch)
    trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
    buildah add --quiet "$ctr" "$BASE_TAR" / >/dev/null
    buildah config --cmd /bin/bash \
        --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --label io.kcoll.base="debian bookworm minbase (mmdebstrap)" "$ctr"
    buildah commit --quiet --rm "$ctr" "$BASE_IMAGE" >/dev/null
    trap - EXIT
    log "base image imported in $((SECONDS - step_start)) s"
fi

# ---- 3. the Dockerfile, CPU-only (or CUDA=ON with a local toolkit), that base for both stages ----
step_start=$SECONDS
# The revision label is also given to bud itself: buildah 1.28 reuses a cached LABEL step whose
# VCS_REF build argument changed (seen: a docs-only commit kept the previous commit's revision).
log "buildah bud -t $TAG (${cuda_args[*]}, KCOLL_VERSION=$VERSION, revision $REVISION; deadline ${STEP_TIMEOUT} s)"
timeout -k 30 "$STEP_TIMEOUT" buildah bud --isolation chroot --layers --force-rm --pull-never \
    --network host \
    "${cuda_args[@]}" \
    --build-arg BUILD_IMAGE="$BASE_IMAGE" \
    --build-arg RUNTIME_IMAGE="$BASE_IMAGE" \
    --build-arg KCOLL_VERSION="$VERSION" \
    --build-arg VCS_REF="$REVISION" \
    --label org.opencontainers.image.revision="$REVISION" \
    -f "$ROOT/Dockerfile" -t "$TAG" "$ROOT" ||
    die "buildah bud failed or ran past ${STEP_TIMEOUT} s (the log above says which step)"
BUD_SECONDS=$((SECONDS - step_start))
log "image built in $BUD_SECONDS s"

# ---- 4. what was built ----
size=$(buildah images --noheading --format '{{.Size}}' "$TAG" | head -n 1)
[ -n "$size" ] || die "buildah images knows no $TAG after the build"
layers=$(buildah inspect --type image --format '{{len .OCIv1.RootFS.DiffIDs}}' "$TAG")
cat >"$CACHE_DIR/$ENV_FILE.tmp" <<EOF
IMAGE=$TAG
VERSION=$VERSION
REVISION=$REVISION
BASE_IMAGE=$BASE_IMAGE
SIZE="$size"
LAYERS=$layers
CUDA=$([ -n "$CUDA_TOOLKIT" ] && echo ON || echo OFF)
BASE_SECONDS=$BASE_SECONDS
BUD_SECONDS=$BUD_SECONDS
TOTAL_SECONDS=$((SECONDS - T0))
EOF
mv -f "$CACHE_DIR/$ENV_FILE.tmp" "$CACHE_DIR/$ENV_FILE"
log "$TAG: $size (uncompressed, as buildah counts it), $layers layers (the base: 1); total $((SECONDS - T0)) s"
