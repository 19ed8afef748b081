/* The argument checks of the backend's list-shaped operations (see shapes.h). */
#include "shapes.h"

#include "comm.h"

#include <algorithm>

namespace kcoll
{

void check_same(const at::Tensor &t, const at::Tensor &ref, const char *op)
{
    check_tensor(t, op);
    TORCH_CHECK(t.numel() == ref.numel() && t.scalar_type() == ref.scalar_type(), "kcoll: ", op,
                ": every tensor has the same size and dtype (", ref.numel(), " x ",
                ref.scalar_type(), "; got ", t.numel(), " x ", t.scalar_type(), ")");
}

std::vector<at::Tensor> world_list(int size, const std::vector<std::vector<at::Tensor>> &lists,
                                   const at::Tensor &ref, const char *op, const char *which,
                                   int mine)
{
    TORCH_CHECK(lists.size() == 1 && lists[0].size() == static_cast<size_t>(size), "kcoll: ", op,
                ": one ", which, " list of ", size, " tensors");
    for (int r = 0; r < size; r++) {
        const at::Tensor &t = lists[0][r];
        if (mine < 0 || r == mine) {
            check_same(t, ref, op);
            continue;
        }
        check_tensor(t, op);
        TORCH_CHECK(t.scalar_type() == ref.scalar_type() && t.device() == ref.device(),
                    "kcoll: ", op, ": every tensor has the dtype and device of this rank's (",
                    ref.scalar_type(), " on ", ref.device(), "; got ", t.scalar_type(), " on ",
                    t.device(), " at index ", r, ")");
    }
    return lists[0];
}

bool all_sized(const std::vector<at::Tensor> &ts, int64_t n)
{
    return std::all_of(ts.begin(), ts.end(), [n](const at::Tensor &t) { return t.numel() == n; });
}

std::vector<at::Tensor> root_list(int size, int rank,
                                  const std::vector<std::vector<at::Tensor>> &lists, int root,
                                  const at::Tensor &ref, const char *op, const char *which)
{
    if (rank != root) {
        TORCH_CHECK(lists.empty() || lists[0].empty(), "kcoll: ", op, ": only the root passes ",
                    which, "s");
        return {};
    }
    return world_list(size, lists, ref, op, which);
}

void check_world_times(int size, const at::Tensor &big, const char *which, const at::Tensor &small,
                       const char *op)
{
    check_tensor(big, op);
    check_tensor(small, op);
    TORCH_CHECK(big.numel() == small.numel() * size && big.scalar_type() == small.scalar_type(),
                "kcoll: ", op, ": the ", which, " must hold world_size (", size,
                ") times the other tensor's elements, of the same dtype");
}

std::vector<int64_t> blocks(int size, const at::Tensor &t, const std::vector<int64_t> &splits,
                            const char *which)
{
    int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    std::vector<int64_t> b;
    if (splits.empty()) {
        TORCH_CHECK(rows % size == 0, "kcoll: all_to_all_single: the ", which,
                    "'s first dimension (", rows, ") is not a multiple of world_size");
        b.assign(size, rows / size);
        return b;
    }
    TORCH_CHECK(splits.size() == static_cast<size_t>(size), "kcoll: all_to_all_single: ", which,
                " split sizes need world_size (", size, ") entries");
    int64_t sum = 0;
    for (int64_t s : splits) {
        TORCH_CHECK(s >= 0, "kcoll: all_to_all_single: a negative split size");
        sum += s;
    }
    TORCH_CHECK(sum == rows, "kcoll: all_to_all_single: ", which, " split sizes add up to ", sum,
                ", the tensor has ", rows, " rows");
    return splits;
}

} // namespace kcoll
