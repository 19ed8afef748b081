/* The coll.h calls of the backend's jobs that more than one operation makes (all_gather into a
 * list or a tensor, reduce_scatter into a tensor, the bitwise reductions), on the worker, with
 * strided tensors staged (Staging) and errors raised as RuntimeError. */
#ifndef KCOLL_TORCH_CALLS_H
#define KCOLL_TORCH_CALLS_H

#include <torch/python.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "comm.h"

namespace kcoll
{

/* fn's sends and receives in one coll group, the group closed even when fn throws; then the
 * results of strided outputs are written back (op names the operation in messages) */
void in_group(const char *op, const std::function<void(Staging &)> &fn);

/* in from every rank, through a temporary, into outs (world_size tensors of in's size) */
void gather_list(const Comm &c, const at::Tensor &in, const std::vector<at::Tensor> &outs);

/* in from every rank into out (world_size times in's elements) */
void gather_into(const Comm &c, const at::Tensor &in, const at::Tensor &out);

/* in (world_size times out's elements) reduced over every rank, this rank's block into out */
void scatter_into(const Comm &c, const at::Tensor &in, const at::Tensor &out, coll_op_t op,
                  const c10d::ReduceOp &rop);

/* op (BAND, BOR or BXOR) over every rank's flat (1-d, contiguous) tensor, in a new tensor of
 * its size: the tensors are gathered (coll_all_gather: world_size times their bytes reach each
 * rank, where coll.h's own reductions move about twice) and reduced here in rank order. */
at::Tensor bitwise_all(const Comm &c, const at::Tensor &flat, const c10d::ReduceOp &op);

/* bitwise_all of mine, elements [off, off + out's size) of the result into out (undefined:
 * computed, not kept) */
void bitwise_into(const Comm &c, const at::Tensor &mine, const c10d::ReduceOp &rop,
                  const at::Tensor &out, int64_t off);

} // namespace kcoll

#endif /* KCOLL_TORCH_CALLS_H */
