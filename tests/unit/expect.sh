# shellcheck shell=bash
# Sourced by the shell tests of this folder: expect NAME OUTPUT PATTERN... counts each fixed-string
# PATTERN found in OUTPUT as passed, each missing one as failed (printing the output).
passed=0 failed=0
expect() {
    local name=$1 out=$2
    shift 2
    for pat in "$@"; do
        if grep -qF -- "$pat" <<<"$out"; then
            passed=$((passed + 1))
        else
            failed=$((failed + 1))
            echo "FAIL $name: no \"$pat\" in:"
            sed 's/^/  /' <<<"$out"
        fi
    done
}
