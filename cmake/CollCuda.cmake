# CUDA is optional. COLL_CUDA=AUTO (default) builds the CUDA kernels when nvcc is found, ON
# requires it, OFF builds CPU-only. Results, for the rest of the build:
#   COLL_HAVE_CUDA              ON when the CUDA language is enabled
#   COLL_CUDA_RUNTIME_VERSION   the toolkit in CUDART_VERSION form (major*1000 + minor*10), or ""
# One STATUS line says which way it went. Included from the top-level CMakeLists.txt, because
# enable_language() must run at the top level for every directory to see the language.
include(CheckLanguage)

set(COLL_CUDA AUTO CACHE STRING "build the CUDA kernels: AUTO (when nvcc is found), ON, OFF")
set_property(CACHE COLL_CUDA PROPERTY STRINGS AUTO ON OFF)

set(COLL_HAVE_CUDA OFF)
set(COLL_CUDA_RUNTIME_VERSION "")
string(TOUPPER "${COLL_CUDA}" _coll_cuda)

if(_coll_cuda MATCHES "^(OFF|FALSE|NO|N|0)$")
  message(STATUS "CUDA: disabled (COLL_CUDA=${COLL_CUDA}); building CPU-only")
else()
  # The kernels are built for A100 (sm_80) and H100/H200 (sm_90) plus sm_90 PTX for newer GPUs.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80-real;90-real;90-virtual")
  endif()
  check_language(CUDA)
  # The usual toolkit place, when nvcc is not on PATH.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    unset(CMAKE_CUDA_COMPILER)
    unset(CMAKE_CUDA_COMPILER CACHE)
    set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
    check_language(CUDA)
  endif()
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(COLL_HAVE_CUDA ON)
    math(EXPR COLL_CUDA_RUNTIME_VERSION
      "${CUDAToolkit_VERSION_MAJOR} * 1000 + ${CUDAToolkit_VERSION_MINOR} * 10")
    message(STATUS "CUDA: ${CMAKE_CUDA_COMPILER} (CUDA ${CUDAToolkit_VERSION}), kernels for "
      "${CMAKE_CUDA_ARCHITECTURES}")
  elseif(_coll_cuda STREQUAL "ON")
    message(FATAL_ERROR "COLL_CUDA=ON but no working nvcc was found: put nvcc on PATH, set "
      "CUDACXX or CMAKE_CUDA_COMPILER, or configure with -DCOLL_CUDA=OFF")
  else()
    message(STATUS "CUDA: nvcc not found; building CPU-only (no CUDA kernels, no gpu tests)")
  endif()
endif()
unset(_coll_cuda)
