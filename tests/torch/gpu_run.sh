#!/usr/bin/env bash
# The torch backend on a machine with a GPU and a PyTorch with CUDA (not part of ctest: CI has
# no GPU): builds libcoll with the CUDA plugin into build-gpu/, the package with setup.py against
# that PyTorch (in place, python/kcoll/_C*.so), then tests/torch/cuda_check.py (2 processes on
# the one GPU) and the CPU suite (test_ops, test_ddp) on that PyTorch.
#   tests/torch/gpu_run.sh [python3]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${1:-python3}
cd "$ROOT"
nvidia-smi -L || true
"$PY" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda,
"available", torch.cuda.is_available(), "python", sys.version.split()[0])'
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOLL_TORCH=OFF \
    -DCOLL_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES="${KCOLL_CUDA_ARCH:-90-real}" >/dev/null
cmake --build build-gpu --parallel "$(nproc)" --target coll coll_cuda coll-run >/dev/null
(cd python && KCOLL_BUILD_DIR="$ROOT/build-gpu" "$PY" setup.py -q build_ext --inplace)
export PYTHONPATH="$ROOT/python" OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
"$PY" -m kcoll.check
timeout 300 "$PY" tests/torch/cuda_check.py --world 2
"$PY" tests/torch/test_ops.py --worlds 2,4
"$PY" tests/torch/test_ddp.py --worlds 2
