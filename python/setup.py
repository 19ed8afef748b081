"""pip install ./python: the kcoll package with its C++ extension, built by PyTorch's
cpp_extension against the PyTorch that runs pip and linked to a libcoll that CMake built.

    scripts/build.sh                                         # build/libcoll/libcoll.so
    python3 -m venv --system-site-packages .venv             # Debian 12 refuses system-wide pip
    .venv/bin/pip install --no-build-isolation ./python      # no PyPI needed

KCOLL_BUILD_DIR names another build folder (default: build/ beside this folder). The extension
finds libcoll.so at run time through its rpath (that folder's libcoll/). The ctest suite uses the
CMake-built package (build/python), not this one.
"""
import os

from setuptools import setup
import torch
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.abspath(os.environ.get("KCOLL_BUILD_DIR", os.path.join(ROOT, "build")))
LIBDIR = os.path.join(BUILD, "libcoll")
if not os.path.exists(os.path.join(LIBDIR, "libcoll.so")):
    raise SystemExit("kcoll: %s/libcoll.so not found: build kcoll first (scripts/build.sh) or set "
                     "KCOLL_BUILD_DIR to a CMake build folder" % LIBDIR)

# A PyTorch with CUDA gets the CUDA tensor path (PyTorch's current stream to kcoll's device path).
CUDA = torch.version.cuda is not None and os.environ.get("KCOLL_TORCH_CUDA", "1") != "0"
Extension = CUDAExtension if CUDA else CppExtension

setup(
    name="kcoll",
    version="0.1.0",
    description="kcoll's torch.distributed backend (import kcoll; init_process_group('kcoll'))",
    packages=["kcoll"],
    ext_modules=[Extension(
        "kcoll._C", ["kcoll/csrc/backend.cpp", "kcoll/csrc/comm.cpp", "kcoll/csrc/shapes.cpp",
                     "kcoll/csrc/worker.cpp", "kcoll/csrc/calls.cpp"],
        define_macros=[("KCOLL_TORCH_CUDA", "1")] if CUDA else [],
        include_dirs=[os.path.join(ROOT, "libcoll", "include"), os.path.join(HERE, "kcoll",
                                                                           "csrc")],
        library_dirs=[LIBDIR], libraries=["coll"],
        # warnings are checked (-Werror) in the CMake build, where PyTorch's headers are system
        # headers; here they are not, and 1.13's own headers warn
        extra_compile_args=["-std=c++17"],
        extra_link_args=["-Wl,-rpath," + LIBDIR])],
    cmdclass={"build_ext": BuildExtension},
)
