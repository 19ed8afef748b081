#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   1. scripts/setup.sh (install what is missing)
#   2. build/ + ctest (with label image: the agent image built with buildah and run)
#   3. build-asan/ (ASan + UBSan) + ctest
#   4. build-fuzz/ (clang, libFuzzer) + every fuzz target for KCOLL_FUZZ_SECONDS (20) each
#   5. build-clang/ (clang, -Wall -Wextra -Werror as in build/; compiled, not run: a user may
#      build with CC=clang, and clang warns where gcc does not)
#   6. clang-format --dry-run --Werror on every tracked C, C++ and CUDA file
# Every stage runs even when an earlier one failed; the exit status is non-zero if any failed.
# KCOLL_SKIP_SETUP=1 skips stage 1 (for a machine that is known to be set up).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export PATH="$ROOT/.deps/bin:$PATH"
# Multi-process tests fork many ranks with deadlines; on a small machine run them one at a time.
CTEST_JOBS=${CTEST_JOBS:-2} # two at a time, as on CI's two cores (README, "Building by hand")

failed=()
passed=()
stage() {
    local name=$1 start=$SECONDS
    shift
    echo
    echo "==== test: $name"
    if "$@"; then
        passed+=("$name")
        echo "==== test: $name passed in $((SECONDS - start)) s"
    else
        echo "==== test: $name FAILED after $((SECONDS - start)) s" >&2
        failed+=("$name")
    fi
}

run_ctest() {
    local dir=$1
    (cd "$dir" && ctest --output-on-failure --no-tests=error -j "$CTEST_JOBS")
}

build_and_ctest() {
    local dir=$1
    shift
    "$ROOT/scripts/build.sh" "$@" && run_ctest "$dir"
}

# Every target compiled by clang (the C; nvcc keeps its own host compiler) with the warnings
# build/ has, as errors. The tests run in build/ and build-asan/.
clang_build() {
    local dir="$ROOT/build-clang"
    local generator=()
    [ -f "$dir/CMakeCache.txt" ] || generator=(-G Ninja)
    CC=clang cmake -S "$ROOT" -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
        cmake --build "$dir" --parallel "${JOBS:-$(nproc)}"
}

format_check() {
    local files=()
    mapfile -t files < <(git -C "$ROOT" ls-files -- '*.c' '*.h' '*.cpp' '*.cu' '*.cuh')
    if [ ${#files[@]} -eq 0 ]; then
        echo "format: no tracked C, C++ or CUDA files"
        return 1
    fi
    clang-format --dry-run --Werror "${files[@]}" &&
        echo "format: ${#files[@]} files formatted as .clang-format says"
}

# The fuzz targets only (the library and the agent compiled again with coverage and sanitizers),
# without CUDA, then a fixed time on each (tests/fuzz/run.sh works on a copy of the checked-in
# corpus; a crash, leak, hang or broken invariant fails the stage). 15 targets x 20 s: about 5.5
# minutes of fuzzing plus the build.
fuzz_budget() {
    local dir="$ROOT/build-fuzz"
    local generator=()
    # shellcheck source=../tests/fuzz/targets.sh
    . "$ROOT/tests/fuzz/targets.sh"
    [ -f "$dir/CMakeCache.txt" ] || generator=(-G Ninja)
    CC=clang cmake -S "$ROOT" -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCOLL_FUZZ=ON -DCOLL_CUDA=OFF &&
        cmake --build "$dir" --parallel "${JOBS:-$(nproc)}" --target "${FUZZ_TARGETS[@]/#/fuzz_}" &&
        "$ROOT/tests/fuzz/run.sh" "$dir" "${KCOLL_FUZZ_SECONDS:-20}" "${FUZZ_CI_TARGETS[@]}"
}

if [ "${KCOLL_SKIP_SETUP:-0}" = 1 ]; then
    echo "test: KCOLL_SKIP_SETUP=1, not running scripts/setup.sh"
else
    "$ROOT/scripts/setup.sh"
fi

ctest_start=$(date +%s)
stage "build + ctest" build_and_ctest "$ROOT/build"
# The agent image that ctest's label image built just now (tests/image): what it took, for CI.
image_env="$ROOT/build-image/image.env"
if [ -f "$image_env" ] && [ "$(stat -c %Y "$image_env")" -ge "$ctest_start" ]; then
    (
        # shellcheck disable=SC1090
        . "$image_env"
        echo "test: agent image $IMAGE: $SIZE, $LAYERS layers; build ${TOTAL_SECONDS:-?} s" \
            "(base tarball ${BASE_SECONDS:-?} s, buildah bud ${BUD_SECONDS:-?} s)"
    )
fi
# Sanitizer findings fail the test that triggered them (the build uses -fno-sanitize-recover);
# leak checking is on, as by default; UBSan reports get a stack trace.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
stage "ASan+UBSan build + ctest" build_and_ctest "$ROOT/build-asan" --asan
stage "fuzz (${KCOLL_FUZZ_SECONDS:-20} s per target)" fuzz_budget
stage "clang -Werror build" clang_build
stage "clang-format check" format_check

echo
echo "test: stages passed: ${#passed[@]}, failed: ${#failed[@]}, in $SECONDS s"
if [ ${#failed[@]} -ne 0 ]; then
    printf 'test: FAILED: %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "test: all stages passed"
