#!/usr/bin/env bash
# Configure and build kcoll with CMake + Ninja.
#   scripts/build.sh          -> build/       (RelWithDebInfo)
#   scripts/build.sh --asan   -> build-asan/  (AddressSanitizer + UndefinedBehaviorSanitizer)
# Extra arguments after -- go to the CMake configure step (e.g. -- -DCOLL_WERROR=OFF).
# JOBS=N sets the build parallelism (default: the number of CPUs).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() {
    echo "usage: scripts/build.sh [--asan] [-- cmake-configure-args...]"
}

build_dir="$ROOT/build"
cmake_args=(-DCOLL_SANITIZE=OFF)
while [ $# -gt 0 ]; do
    case "$1" in
    --asan)
        build_dir="$ROOT/build-asan"
        cmake_args=(-DCOLL_SANITIZE=ON)
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    --)
        shift
        cmake_args+=("$@")
        break
        ;;
    *)
        echo "build: unknown argument '$1'" >&2
        usage >&2
        exit 2
        ;;
    esac
    shift
done

for tool in cmake ninja; do
    command -v "$tool" >/dev/null || {
        echo "build: $tool not found; run scripts/setup.sh first" >&2
        exit 1
    }
done

jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
generator=()
# The generator can only be chosen when the build folder is first configured.
[ -f "$build_dir/CMakeCache.txt" ] || generator=(-G Ninja)

echo "build: configuring ${build_dir#"$ROOT"/}"
cmake -S "$ROOT" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "${cmake_args[@]}"
echo "build: building ${build_dir#"$ROOT"/} with $jobs jobs"
cmake --build "$build_dir" --parallel "$jobs"
