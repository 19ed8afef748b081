# syntax=docker/dockerfile:1
# The kcoll agent image: coll-agent (sidecar and admission-webhook modes), the pinned libcoll
# build that the sidecar copies into every training pod, kcoll's NCCL face (libnccl.so.2, when the
# build stage has nccl.h) and the tools coll-run and coll-perf.
#
# Production (CUDA kernels, NCCL face), from the NVIDIA CUDA bases (V=$(scripts/version.sh)):
#   docker build -t REGISTRY/kcoll-agent:$V --build-arg KCOLL_VERSION=$V \
#     --build-arg VCS_REF=$(git rev-parse HEAD) .
# CPU-only, from plain Debian 12 bases (scripts/build-image.sh does this with buildah):
#   docker build -t kcoll-agent:$V-cpu --build-arg KCOLL_VERSION=$V --build-arg CUDA=OFF \
#     --build-arg BUILD_IMAGE=debian:12 --build-arg RUNTIME_IMAGE=debian:12 .
#
# KCOLL_VERSION must equal the library's version string (CMakeLists.txt project(VERSION)): the
# build stage compiles a probe against the built libcoll and fails when they differ, so the
# image's version labels and COLL_LIB_VERSION cannot differ from the library inside. Its default
# here, the chart's appVersion (the default image tag) and the project version are one value;
# scripts/version.sh prints it and the deploy_version test fails when they drift. The image tag
# must carry the library version (the Helm chart refuses a tag whose version differs from
# libraryVersion).
#
# libcoll is built against the glibc of the build base and is loaded by the training containers:
# pick a base with a glibc no newer than theirs (Ubuntu 22.04: glibc 2.35, Debian 12: 2.36).

# The two bases, each switchable. Keep the build stage's distribution and glibc equal to or older
# than the runtime stage's.
ARG BUILD_IMAGE=nvidia/cuda:12.4.1-devel-ubuntu22.04
ARG RUNTIME_IMAGE=nvidia/cuda:12.4.1-base-ubuntu22.04

# ---------------------------------------------------------------------------------------------
# build: CMake, Ninja, a C compiler and the -dev packages of the agent's libraries (the same list
# as scripts/setup.sh); with CUDA=ON the base's nvcc compiles the kernels for the GPU too.
FROM ${BUILD_IMAGE} AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      cmake ninja-build pkg-config build-essential \
      libcurl4-openssl-dev libjansson-dev libyaml-dev libmicrohttpd-dev libgnutls28-dev \
      libibverbs-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The arguments are declared after the package step, so that another value reuses its layer.
ARG KCOLL_VERSION=0.1.0
# ON: CUDA kernels and the GPU plugin (needs nvcc in the base); OFF: CPU-only.
ARG CUDA=ON
# GPU architectures the kernels are compiled for (Ampere, Hopper); override for others.
ARG CUDA_ARCHITECTURES="80;90"
# Tests are not built (they need helm, kubectl, network namespaces); scripts/test.sh runs them.
# The version string is the project's (no -DCOLL_VERSION_STRING): the probe below checks it.
# COLL_WERROR=OFF: warnings stay visible in the log but do not fail a release build on another
# base's compiler (-Werror is the CI gate of scripts/test.sh, on the Debian 12 compiler).
RUN case "${CUDA}" in \
      ON) cuda_flags="-DCOLL_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}" ;; \
      OFF) cuda_flags="-DCOLL_CUDA=OFF" ;; \
      *) echo "CUDA must be ON or OFF, got '${CUDA}'" >&2; exit 1 ;; \
    esac \
 && cmake -S . -B /build -G Ninja \
      -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX=/opt/kcoll \
      ${cuda_flags} \
      -DCOLL_BUILD_TESTS=OFF \
      -DCOLL_TEST_HOOKS=OFF \
      -DCOLL_WERROR=OFF \
      -DCOLL_BUILD_TOOLS=ON \
 && cmake --build /build --parallel \
 && cmake --install /build \
 && rm -f /opt/kcoll/lib/libcoll.a \
 && test -e /opt/kcoll/lib/kcoll-nccl-env/libnccl-env.so \
 && cp -P /usr/lib/*-linux-gnu/libjansson.so.4* /opt/kcoll/lib/kcoll-nccl-env/ \
 && test -x /opt/kcoll/bin/coll-agent \
 && test -x /opt/kcoll/bin/coll-run \
 && test -x /opt/kcoll/bin/coll-perf \
 && ls /opt/kcoll/lib/libcoll.so* \
 && /opt/kcoll/bin/coll-agent webhook --help >/dev/null \
 && printf '#include <coll.h>\n#include <stdio.h>\nint main(void) { puts(coll_get_version_string()); return 0; }\n' \
      >/tmp/version.c \
 && cc -o /tmp/version /tmp/version.c -I/opt/kcoll/include -L/opt/kcoll/lib -lcoll \
 && lib_version=$(LD_LIBRARY_PATH=/opt/kcoll/lib /tmp/version) \
 && agent_version=$(/opt/kcoll/bin/coll-agent --version | awk '{print $2}') \
 && if [ "${lib_version}" != "${KCOLL_VERSION}" ] || [ "${agent_version}" != "${KCOLL_VERSION}" ]; then \
      echo "KCOLL_VERSION=${KCOLL_VERSION} but the library says ${lib_version} and coll-agent" \
           "${agent_version}: build with --build-arg KCOLL_VERSION=${lib_version}" \
           "(scripts/version.sh prints it)" >&2; \
      exit 1; \
    fi \
 && rm -f /tmp/version /tmp/version.c \
 && echo "kcoll ${lib_version}, CUDA=${CUDA}:" && find /opt/kcoll/lib -name '*.so*' | sort

# ---------------------------------------------------------------------------------------------
# runtime: the base (for CUDA: driver-facing runtime only, no compilers) + the shared libraries
# the binaries link; no build tools, no headers but coll.h, no package lists.
FROM ${RUNTIME_IMAGE} AS runtime
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libcurl4 libjansson4 libyaml-0-2 libmicrohttpd12 libgnutls30 ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb \
      /var/log/apt /var/log/dpkg.log \
 && groupadd --system --gid 10001 kcoll \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin kcoll
# bin/, lib/ (libcoll.so*, libcoll_cuda.so*, kcoll-nccl/, kcoll-nccl-env/: NVIDIA NCCL's env
# plugin with the libjansson it loads from beside itself) and include/coll.h, in one layer
COPY --from=build /opt/kcoll/ /opt/kcoll/
ARG KCOLL_VERSION=0.1.0
ARG CUDA=ON
# NVIDIA_VISIBLE_DEVICES=void: the CUDA base image says "all", which would hand every GPU of the
# node to the sidecar and the webhook under the NVIDIA container runtime; neither needs one.
ENV PATH=/opt/kcoll/bin:${PATH} \
    LD_LIBRARY_PATH=/opt/kcoll/lib \
    NVIDIA_VISIBLE_DEVICES=void \
    COLL_AGENT_LIB_SRC=/opt/kcoll/lib \
    COLL_LIB_VERSION=${KCOLL_VERSION}
# Every shared library that the binaries (installed without a run path: LD_LIBRARY_PATH above),
# libcoll and the NCCL face need is present (libibverbs and libcuda are dlopen'ed at run time,
# from the training container, and are not needed here).
RUN for f in /opt/kcoll/bin/* $(find /opt/kcoll/lib -name '*.so' -o -name '*.so.[0-9]'); do \
      if ldd "$f" | grep -q 'not found'; then echo "$f:"; ldd "$f"; exit 1; fi; \
    done
# Declared last: a new revision must not rerun the steps above.
ARG VCS_REF=unknown
ARG SOURCE_URL=https://kcoll.io/source
LABEL org.opencontainers.image.title="kcoll-agent" \
      org.opencontainers.image.description="kcoll coll-agent sidecar/webhook with the pinned libcoll build" \
      org.opencontainers.image.version="${KCOLL_VERSION}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      io.kcoll.library-version="${KCOLL_VERSION}" \
      io.kcoll.cuda="${CUDA}"
USER 10001:10001
# Sidecar by default; the webhook Deployment runs `coll-agent webhook ...`.
ENTRYPOINT ["/opt/kcoll/bin/coll-agent"]
