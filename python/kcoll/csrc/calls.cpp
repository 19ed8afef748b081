/* The coll.h calls that several of the backend's operations make (calls.h). */
#include "calls.h"

namespace kcoll
{

void in_group(const char *op, const std::function<void(Staging &)> &fn)
{
    Staging s(op);
    check(coll_group_start(), "coll_group_start");
    try {
        fn(s);
    } catch (...) {
        (void)coll_group_end(); /* the first error is the one reported */
        throw;
    }
    check(coll_group_end(), "coll_group_end");
    s.finish();
}

void gather_list(const Comm &c, const at::Tensor &in, const std::vector<at::Tensor> &outs)
{
    at::Tensor flat = at::empty({c.size() * in.numel()}, in.options());
    Staging s("all_gather");
    at::Tensor b = s.in(in);
    const Moved m = moved(b, b.numel());
    check(coll_all_gather(b.data_ptr(), flat.data_ptr(), m.count, m.dt, c.get(), stream_of(b)),
          "coll_all_gather");
    for (int i = 0; i < c.size(); i++)
        outs[i].copy_(flat.narrow(0, i * in.numel(), in.numel()).view(outs[i].sizes()));
}

void gather_into(const Comm &c, const at::Tensor &in, const at::Tensor &out)
{
    Staging s("all_gather_into_tensor");
    at::Tensor i = s.in(in), o = s.out(out, false);
    const Moved m = moved(i, i.numel());
    check(coll_all_gather(i.data_ptr(), o.data_ptr(), m.count, m.dt, c.get(), stream_of(i)),
          "coll_all_gather");
    s.finish();
}

void scatter_into(const Comm &c, const at::Tensor &in, const at::Tensor &out, coll_op_t op,
                  const c10d::ReduceOp &rop)
{
    if (is_bitwise(rop))
        return bitwise_into(c, in, rop, out, c.rank() * out.numel());
    OpFor o(rop, op, out, c.get());
    Staging s("reduce_scatter_tensor");
    at::Tensor i = s.in(in), b = s.out(out, false);
    check(coll_reduce_scatter(i.data_ptr(), b.data_ptr(), b.numel(), dtype_of(b), o.get(), c.get(),
                              stream_of(b)),
          "coll_reduce_scatter");
    s.finish();
}

at::Tensor bitwise_all(const Comm &c, const at::Tensor &flat, const c10d::ReduceOp &op)
{
    at::Tensor all = at::empty({c.size(), flat.numel()}, flat.options());
    check(coll_all_gather(flat.data_ptr(), all.data_ptr(), flat.numel(), dtype_of(flat), c.get(),
                          stream_of(flat)),
          "coll_all_gather (bitwise reduction)");
    at::Tensor r = all[0].clone();
    for (int i = 1; i < c.size(); i++) {
        if (op == c10d::ReduceOp::BAND)
            r.bitwise_and_(all[i]);
        else if (op == c10d::ReduceOp::BOR)
            r.bitwise_or_(all[i]);
        else
            r.bitwise_xor_(all[i]);
    }
    return r;
}

void bitwise_into(const Comm &c, const at::Tensor &mine, const c10d::ReduceOp &rop,
                  const at::Tensor &out, int64_t off)
{
    at::Tensor r = bitwise_all(c, mine.contiguous().view({-1}), rop);
    if (out.defined())
        out.copy_(r.narrow(0, off, out.numel()).view(out.sizes()));
}

} // namespace kcoll
