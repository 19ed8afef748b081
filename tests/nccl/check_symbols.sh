#!/usr/bin/env bash
# Every name NVIDIA's libnccl.so.2 exports is exported by kcoll's, and kcoll's exports nothing
# else but kcoll* (no libcoll internals, no coll_* API): a framework binds with RTLD_NOW, so one
# missing name would fail its import.
#   check_symbols.sh OURS [REAL]   REAL: NVIDIA's library; without it, the list checked in beside
#                                  this script (nccl-2.28.9.symbols, made from 2.28.9) is the
#                                  reference
set -euo pipefail
ours=$1
real=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
exports() { nm -D --defined-only "$1" | awk '{print $3}' | sort -u; }
if [ -n "$real" ] && [ -f "$real" ]; then
    want=$(exports "$real" | grep -E '^p?nccl')
    from="$real"
else
    want=$(sort -u "$here/nccl-2.28.9.symbols")
    from="$here/nccl-2.28.9.symbols"
fi
have=$(exports "$ours")
missing=$(comm -23 <(echo "$want") <(echo "$have"))
extra=$(echo "$have" | grep -Ev '^(p?nccl|kcoll)' || true)
n=$(echo "$want" | wc -l)
status=0
if [ -n "$missing" ]; then
    echo "FAIL: $ours lacks $(echo "$missing" | wc -l) of the $n names $from exports:"
    echo "$missing" | sed 's/^/  /'
    status=1
fi
if [ -n "$extra" ]; then
    echo "FAIL: $ours exports names outside NCCL's API (and kcoll*):"
    echo "$extra" | sed 's/^/  /'
    status=1
fi
[ $status = 0 ] && echo "ok: all $n names of $from are exported, nothing else but kcoll*"
exit $status
