/* The argument checks of the backend's list-shaped operations (all_gather, gather, scatter,
 * reduce_scatter, all_to_all_single): what each tensor list must hold for a group of `size`
 * ranks, refused with a message naming the operation. */
#ifndef KCOLL_TORCH_SHAPES_H
#define KCOLL_TORCH_SHAPES_H

#include <torch/python.h>

#include <cstdint>
#include <vector>

namespace kcoll
{

/* t is a tensor kcoll takes, of ref's size and dtype. */
void check_same(const at::Tensor &t, const at::Tensor &ref, const char *op);

/* One list of size tensors, each of ref's size and dtype; where mine >= 0, of ref's dtype and
 * any size but the one at index mine, which has ref's (an uneven all_gather's outputs). */
std::vector<at::Tensor> world_list(int size, const std::vector<std::vector<at::Tensor>> &lists,
                                   const at::Tensor &ref, const char *op, const char *which,
                                   int mine = -1);

/* Every tensor of ts has n elements. */
bool all_sized(const std::vector<at::Tensor> &ts, int64_t n);

/* gather's outputs, scatter's inputs: size tensors like ref on the root, none elsewhere. */
std::vector<at::Tensor> root_list(int size, int rank,
                                  const std::vector<std::vector<at::Tensor>> &lists, int root,
                                  const at::Tensor &ref, const char *op, const char *which);

/* big (called which) holds size times small's elements, of small's dtype. */
void check_world_times(int size, const at::Tensor &big, const char *which, const at::Tensor &small,
                       const char *op);

/* Row counts of the blocks of t per rank from split sizes (empty: equal blocks). */
std::vector<int64_t> blocks(int size, const at::Tensor &t, const std::vector<int64_t> &splits,
                            const char *which);

} // namespace kcoll

#endif
