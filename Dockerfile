# syntax=docker/dockerfile:1
# The kcoll agent image: coll-agent (sidecar and admission-webhook modes), the pinned libcoll
# build that the sidecar copies into every training pod, and the tools coll-run and coll-perf.
#
#   docker build -t ghcr.io/kcoll/kcoll-agent:0.1.0 --build-arg KCOLL_VERSION=0.1.0 .
#
# The image tag must carry the library version (the Helm chart refuses a tag whose version differs
# from libraryVersion). libcoll is built against the glibc of UBUNTU_VERSION and is loaded by the
# training containers: build with an older base (e.g. 20.04) for images with an older glibc.

ARG CUDA_VERSION=12.4.1
ARG UBUNTU_VERSION=22.04

# ---------------------------------------------------------------------------------------------
# build: CUDA toolkit (nvcc, so the kernels are compiled for the GPU too), CMake, Ninja and the
# -dev packages of the agent's libraries (the same list as scripts/setup.sh).
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu${UBUNTU_VERSION} AS build
ARG KCOLL_VERSION=0.1.0
# GPU architectures the kernels are compiled for (Ampere, Hopper); override for others.
ARG CUDA_ARCHITECTURES="80;90"
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      cmake ninja-build pkg-config build-essential \
      libcurl4-openssl-dev libjansson-dev libyaml-dev libmicrohttpd-dev libgnutls28-dev \
      libibverbs-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Tests are not built (they need helm, kubectl, network namespaces); scripts/test.sh runs them.
RUN cmake -S . -B /build -G Ninja \
      -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX=/opt/kcoll \
      -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" \
      -DCOLL_VERSION_STRING="${KCOLL_VERSION}" \
      -DCOLL_BUILD_TESTS=OFF \
      -DCOLL_TEST_HOOKS=OFF \
      -DCOLL_BUILD_TOOLS=ON \
 && cmake --build /build --parallel \
 && cmake --install /build \
 && rm -f /opt/kcoll/lib/libcoll.a \
 && test -x /opt/kcoll/bin/coll-agent \
 && test -x /opt/kcoll/bin/coll-run \
 && test -x /opt/kcoll/bin/coll-perf \
 && ls /opt/kcoll/lib/libcoll.so* \
 && /opt/kcoll/bin/coll-agent webhook --help >/dev/null

# ---------------------------------------------------------------------------------------------
# runtime: CUDA base (driver-facing runtime only, no compilers) + the shared libraries the
# binaries link; no build tools, no headers, no package lists.
FROM nvidia/cuda:${CUDA_VERSION}-base-ubuntu${UBUNTU_VERSION} AS runtime
ARG KCOLL_VERSION=0.1.0
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libcurl4 libjansson4 libyaml-0-2 libmicrohttpd12 libgnutls30 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 kcoll \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin kcoll
COPY --from=build /opt/kcoll/bin/ /opt/kcoll/bin/
COPY --from=build /opt/kcoll/lib/ /opt/kcoll/lib/
COPY --from=build /opt/kcoll/include/ /opt/kcoll/include/
# Every shared library the binaries and libcoll need is present (libibverbs is dlopen'ed at run
# time, from the training container, and is not needed here).
RUN for f in /opt/kcoll/bin/* /opt/kcoll/lib/libcoll.so; do \
      if ldd "$f" | grep -q 'not found'; then ldd "$f"; exit 1; fi; \
    done
# NVIDIA_VISIBLE_DEVICES=void: the CUDA base image says "all", which would hand every GPU of the
# node to the sidecar and the webhook under the NVIDIA container runtime; neither needs one.
ENV PATH=/opt/kcoll/bin:${PATH} \
    LD_LIBRARY_PATH=/opt/kcoll/lib \
    NVIDIA_VISIBLE_DEVICES=void \
    COLL_AGENT_LIB_SRC=/opt/kcoll/lib \
    COLL_LIB_VERSION=${KCOLL_VERSION}
LABEL org.opencontainers.image.title="kcoll-agent" \
      org.opencontainers.image.description="kcoll coll-agent sidecar/webhook with the pinned libcoll build" \
      org.opencontainers.image.version="${KCOLL_VERSION}" \
      io.kcoll.library-version="${KCOLL_VERSION}"
USER 10001:10001
# Sidecar by default; the webhook Deployment runs `coll-agent webhook ...`.
ENTRYPOINT ["/opt/kcoll/bin/coll-agent"]
