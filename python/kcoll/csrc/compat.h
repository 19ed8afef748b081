/*
 * The one place where PyTorch's C++ API differs between the versions kcoll's backend supports:
 * 1.13 (Debian 12, tested in CI) subclasses c10d::ProcessGroup; 2.x subclasses c10d::Backend,
 * whose coalescing returns one Work for the whole batch.
 */
#ifndef KCOLL_TORCH_COMPAT_H
#define KCOLL_TORCH_COMPAT_H

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define KCOLL_TORCH_BASE         c10d::Backend
#define KCOLL_TORCH_BASE_NAME    "c10d::Backend"
#define KCOLL_TORCH_COALESCE_RET c10::intrusive_ptr<c10d::Work>
#define KCOLL_TORCH_COALESCE_ARG
#define KCOLL_TORCH_OPTYPE_COALESCED c10d::OpType::COALESCED
/* PREMUL_SUM's factor as a tensor (undefined when it is a double) */
#define KCOLL_TORCH_PREMUL_TENSOR(s) ((s)->tensor_factor)
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#define KCOLL_TORCH_BASE             c10d::ProcessGroup
#define KCOLL_TORCH_BASE_NAME        "c10d::ProcessGroup"
#define KCOLL_TORCH_COALESCE_RET     void
#define KCOLL_TORCH_COALESCE_ARG     std::vector<c10::intrusive_ptr<c10d::Work>> &reqs
#define KCOLL_TORCH_OPTYPE_COALESCED c10d::OpType::UNKNOWN /* 1.13 has no COALESCED */
#define KCOLL_TORCH_PREMUL_TENSOR(s)                                                               \
    ((s)->tensor_factors.empty() ? at::Tensor() : (s)->tensor_factors[0])
#endif

/* float8_e4m3fn and float8_e5m2 (PyTorch >= 2.1) map to coll.h's float8 types */
#define KCOLL_TORCH_HAS_FLOAT8                                                                     \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1))

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#if defined(KCOLL_TORCH_CUDA)
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#endif /* KCOLL_TORCH_COMPAT_H */
