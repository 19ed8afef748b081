/*
 * kcoll's torch.distributed backend: a thin layer over coll.h. Every operation becomes one job
 * on one of the process group's two worker threads (worker.h): the collectives run in issue
 * order on the group's communicator, the point-to-point calls in issue order on a twin of it
 * (create), so that a send/recv need not sit at the same place among the collectives on both
 * ranks (Gloo and ProcessGroupNCCL do not ask that either). A Work completes when its job's
 * coll_* calls returned. A wait has a deadline (the group's timeout unless the caller gives one);
 * when it passes, both communicators are aborted so that the workers and every peer stop too, and
 * the wait raises.
 */
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/python.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "coll.h"
#include "comm.h"
#include "calls.h"
#include "shapes.h"
#include "compat.h"
#include "work.h"
#include "worker.h"

namespace py = pybind11;

namespace kcoll
{

class ProcessGroupKcoll : public KCOLL_TORCH_BASE
{
  public:
    /* p2p: comm's twin, for the point-to-point calls (create) */
    ProcessGroupKcoll(std::shared_ptr<Comm> comm, std::shared_ptr<Comm> p2p,
                      std::chrono::milliseconds timeout)
        : KCOLL_TORCH_BASE(comm->rank(), comm->size()), comm_(std::move(comm)),
          p2p_comm_(std::move(p2p)), timeout_(timeout), worker_(std::make_unique<Worker>(comm_)),
          p2p_worker_(std::make_unique<Worker>(p2p_comm_))
    {
    }

    /* the workers are stopped (every queued job run) before the members their jobs use go */
    ~ProcessGroupKcoll() override
    {
        worker_.reset();
        p2p_worker_.reset();
    }

    /* The last strong reference went (destroy_process_group, the group's Python object freed)
     * while the live list still holds a weak one: c10 then calls this, not the destructor (which
     * runs when the list lets go). The worker stops and the communicator is let go now: before,
     * both lived on after destroy_process_group (a thread and the connections per group). */
    void release_resources() override
    {
        worker_.reset();
        p2p_worker_.reset();
        comm_.reset();
        p2p_comm_.reset();
    }

    /* The worker stops once the queued jobs ran, within grace (else the communicator is
     * aborted): the interpreter's exit. Without the GIL. */
    void stop(std::chrono::milliseconds grace)
    {
        const auto end = std::chrono::steady_clock::now() + grace;
        for (Worker *w : {worker_.get(), p2p_worker_.get()})
            if (w)
                w->stop(left_until(end));
    }

    /* The group ends while references to it remain (a DDP model holds one): PyTorch >= 2.7's
     * destroy_process_group calls Backend::shutdown, and kcoll.shutdown(group) does on every
     * version. The queued jobs run (within the group's timeout, else the communicator is
     * aborted), the worker stops, the communicator is let go, and a later collective raises
     * saying so instead of waiting for a worker that is gone. Idempotent. Declared without
     * `override`: the versions whose Backend lacks these build too, and those that have them
     * (the same signature) call these. */
    void shutdown()
    {
        const auto end = std::chrono::steady_clock::now() + timeout_;
        for (Worker *w : {worker_.get(), p2p_worker_.get()})
            w->close("shut down (destroy_process_group or kcoll.shutdown)");
        for (Worker *w : {worker_.get(), p2p_worker_.get()})
            w->stop_releasing_gil(left_until(end));
        for (Comm *c : {comm_.get(), p2p_comm_.get()})
            if (c)
                c->destroy(); /* the Work objects that share it see it gone */
    }

    /* Every call of the group in progress or queued fails now, here and on the peers (their
     * calls with this rank raise naming it): Backend::abort (PyTorch >= 2.7, as torchft
     * calls it) and kcoll.abort(group), safe from another thread while a collective waits. */
    void abort()
    {
        for (Worker *w : {worker_.get(), p2p_worker_.get()})
            w->close("aborted (kcoll.abort or Backend::abort)");
        if (comm_)
            comm_->abort(); /* and its twin */
        for (Worker *w : {worker_.get(), p2p_worker_.get()})
            w->stop_releasing_gil(std::chrono::milliseconds(0));
    }

    /* a wait on this group's communicator was interrupted (Ctrl-C): at exit its call in
     * progress is not waited for */
    bool interrupted() const
    {
        return (comm_ && comm_->interrupted()) || (p2p_comm_ && p2p_comm_->interrupted());
    }

    /* PyTorch >= 2.7's batch_isend_irecv coalesces (startCoalescing .. endCoalescing, one coll
     * group) only where the backend says it can; without it each isend/irecv would run alone
     * and a large exchange would wait on itself. No `override`: older bases lack it. */
    bool supportsCoalescing() const
    {
        return true;
    }

    const std::string getBackendName() const override
    {
        return "kcoll";
    }

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                             const c10d::BroadcastOptions &opts) override
    {
        at::Tensor t = one_tensor(tensors, "broadcast");
        int root = static_cast<int>(opts.rootRank);
        return submit(c10d::OpType::BROADCAST, "broadcast", {t}, [this, t, root] {
            Staging s("broadcast");
            at::Tensor b = s.out(t);
            const Moved m = moved(b, b.numel());
            check(coll_broadcast(b.data_ptr(), b.data_ptr(), m.count, m.dt, root, comm(),
                                 stream_of(b)),
                  "coll_broadcast");
            s.finish();
        });
    }

    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                             const c10d::AllreduceOptions &opts) override
    {
        at::Tensor t = one_tensor(tensors, "all_reduce");
        coll_op_t op = op_of(opts.reduceOp, t);
        c10d::ReduceOp rop = opts.reduceOp;
        return submit(c10d::OpType::ALLREDUCE, "all_reduce", {t}, [this, t, op, rop] {
            if (is_bitwise(rop))
                return bitwise_into(*comm_, t, rop, t, 0);
            OpFor o(rop, op, t, comm());
            Staging s("all_reduce");
            at::Tensor b = s.out(t);
            check(coll_all_reduce(b.data_ptr(), b.data_ptr(), b.numel(), dtype_of(b), o.get(),
                                  comm(), stream_of(b)),
                  "coll_all_reduce");
            s.finish();
        });
    }

    c10::intrusive_ptr<c10d::Work>
    allreduce_coalesced(std::vector<at::Tensor> &tensors,
                        const c10d::AllreduceCoalescedOptions &opts) override
    {
        TORCH_CHECK(!tensors.empty(), "kcoll: allreduce_coalesced of no tensors");
        for (const auto &t : tensors) {
            check_tensor(t, "allreduce_coalesced");
            TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type() &&
                            t.device() == tensors[0].device(),
                        "kcoll: allreduce_coalesced: tensors of one dtype and device only");
        }
        coll_op_t op = op_of(opts.reduceOp, tensors[0]);
        c10d::ReduceOp rop = opts.reduceOp;
        std::vector<at::Tensor> ts = tensors;
        return submit(
            c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", ts, [this, ts, op, rop] {
                at::Tensor flat = flat_cat(ts);
                if (is_bitwise(rop)) {
                    flat = bitwise_all(*comm_, flat, rop);
                } else {
                    OpFor o(rop, op, flat, comm());
                    check(coll_all_reduce(flat.data_ptr(), flat.data_ptr(), flat.numel(),
                                          dtype_of(flat), o.get(), comm(), stream_of(flat)),
                          "coll_all_reduce");
                }
                int64_t off = 0;
                for (const auto &t : ts) {
                    t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
                    off += t.numel();
                }
            });
    }

    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                          const c10d::ReduceOptions &opts) override
    {
        at::Tensor t = one_tensor(tensors, "reduce");
        coll_op_t op = op_of(opts.reduceOp, t);
        c10d::ReduceOp rop = opts.reduceOp;
        int root = static_cast<int>(opts.rootRank);
        return submit(c10d::OpType::REDUCE, "reduce", {t}, [this, t, op, rop, root] {
            if (is_bitwise(rop)) /* every rank computes it; the root keeps it */
                return bitwise_into(*comm_, t, rop, getRank() == root ? t : at::Tensor(), 0);
            OpFor o(rop, op, t, comm()); /* non-root tensors are left as they were */
            Staging s("reduce");
            at::Tensor b = s.out(t);
            check(coll_reduce(b.data_ptr(), b.data_ptr(), b.numel(), dtype_of(b), o.get(), root,
                              comm(), stream_of(b)),
                  "coll_reduce");
            s.finish();
        });
    }

    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                             std::vector<at::Tensor> &inputs,
                                             const c10d::AllgatherOptions &) override
    {
        at::Tensor in = one_tensor(inputs, "all_gather");
        std::vector<at::Tensor> outs =
            world_list(getSize(), outputs, in, "all_gather", "output", getRank());
        if (!all_sized(outs, in.numel()))
            /* uneven sizes, as ProcessGroupNCCL takes them: every rank sends its tensor to each
             * other one, in one group; a size the sender does not agree with is a mismatch */
            return submit(c10d::OpType::ALLGATHER, "all_gather", outs, [this, in, outs] {
                in_group("all_gather", [&](Staging &s) {
                    for (int r = 0; r < getSize(); r++) {
                        if (r == getRank()) {
                            outs[r].copy_(in);
                            continue;
                        }
                        send1(s, in, r);
                        recv1(s, outs[r], r);
                    }
                });
            });
        return submit(c10d::OpType::ALLGATHER, "all_gather", outs,
                      [this, in, outs] { gather_list(*comm_, in, outs); });
    }

    /* dist.all_gather_coalesced (1.13 and 2.x): outputs[r] receives rank r's inputs (a list
     * shaped as inputs); one all_gather per input, in one job */
    c10::intrusive_ptr<c10d::Work>
    allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                        std::vector<at::Tensor> &inputs, const c10d::AllgatherOptions &) override
    {
        TORCH_CHECK(outputs.size() == static_cast<size_t>(getSize()),
                    "kcoll: all_gather_coalesced: one output list per rank (", getSize(), ")");
        std::vector<at::Tensor> ins = inputs, all;
        std::vector<std::vector<at::Tensor>> outs(ins.size());
        for (const auto &list : outputs)
            TORCH_CHECK(list.size() == ins.size(), "kcoll: all_gather_coalesced: each output "
                                                   "list holds one tensor per input");
        for (size_t k = 0; k < ins.size(); k++) {
            check_tensor(ins[k], "all_gather_coalesced");
            for (int r = 0; r < getSize(); r++) {
                check_same(outputs[r][k], ins[k], "all_gather_coalesced");
                outs[k].push_back(outputs[r][k]);
                all.push_back(outputs[r][k]);
            }
        }
        return submit(c10d::OpType::ALLGATHER_COALESCED, "all_gather_coalesced", all,
                      [this, ins, outs] {
                          for (size_t k = 0; k < ins.size(); k++)
                              gather_list(*comm_, ins[k], outs[k]);
                      });
    }

    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                   const c10d::AllgatherOptions &) override
    {
        check_world_times(getSize(), output, "output", input, "all_gather_into_tensor");
        at::Tensor in = input, out = output;
        return submit(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {out},
                      [this, in, out] { gather_into(*comm_, in, out); });
    }

    /* PyTorch 2.x's _coalescing_manager, for all_gather_into_tensor calls made inside it: one
     * all_gather per pair, in one job. Declared without `override`, as shutdown(): 1.13's base
     * has no such method. */
    c10::intrusive_ptr<c10d::Work>
    allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                    std::vector<at::Tensor> &inputs,
                                    const c10d::AllgatherOptions & = c10d::AllgatherOptions())
    {
        TORCH_CHECK(outputs.size() == inputs.size(),
                    "kcoll: all_gather_into_tensor (coalesced): one output per input");
        for (size_t k = 0; k < inputs.size(); k++)
            check_world_times(getSize(), outputs[k], "output", inputs[k],
                              "all_gather_into_tensor (coalesced)");
        std::vector<at::Tensor> ins = inputs, outs = outputs;
        return submit(KCOLL_TORCH_OPTYPE_COALESCED, "all_gather_into_tensor (coalesced)", outs,
                      [this, ins, outs] {
                          for (size_t k = 0; k < ins.size(); k++)
                              gather_into(*comm_, ins[k], outs[k]);
                      });
    }

    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::GatherOptions &opts) override
    {
        at::Tensor in = one_tensor(inputs, "gather");
        int root = static_cast<int>(opts.rootRank);
        std::vector<at::Tensor> outs =
            root_list(getSize(), getRank(), outputs, root, in, "gather", "output");
        return submit(
            c10d::OpType::GATHER, "gather", outs,
            [this, in, outs, root] { rooted(root, in, outs, true); }, in);
    }

    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                           std::vector<std::vector<at::Tensor>> &inputs,
                                           const c10d::ScatterOptions &opts) override
    {
        at::Tensor out = one_tensor(outputs, "scatter");
        int root = static_cast<int>(opts.rootRank);
        std::vector<at::Tensor> ins =
            root_list(getSize(), getRank(), inputs, root, out, "scatter", "input");
        return submit(c10d::OpType::SCATTER, "scatter", {out},
                      [this, ins, out, root] { rooted(root, out, ins, false); });
    }

    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                  std::vector<std::vector<at::Tensor>> &inputs,
                                                  const c10d::ReduceScatterOptions &opts) override
    {
        at::Tensor out = one_tensor(outputs, "reduce_scatter");
        std::vector<at::Tensor> ins =
            world_list(getSize(), inputs, out, "reduce_scatter", "input", getRank());
        coll_op_t op = op_of(opts.reduceOp, out);
        c10d::ReduceOp rop = opts.reduceOp;
        if (!all_sized(ins, out.numel()))
            /* uneven sizes, as ProcessGroupNCCL takes them: one reduce to each rank in turn */
            return submit(
                c10d::OpType::REDUCE_SCATTER, "reduce_scatter", {out}, [this, ins, out, op, rop] {
                    if (is_bitwise(rop)) {
                        int64_t off = 0;
                        for (int r = 0; r < getRank(); r++)
                            off += ins[r].numel();
                        return bitwise_into(*comm_, flat_cat(ins), rop, out, off);
                    }
                    OpFor o(rop, op, out, comm());
                    Staging s("reduce_scatter");
                    at::Tensor b = s.out(out, false);
                    for (int r = 0; r < getSize(); r++) {
                        at::Tensor i = s.in(ins[r]);
                        check(coll_reduce(i.data_ptr(),
                                          r == getRank() ? b.data_ptr() : i.data_ptr(), i.numel(),
                                          dtype_of(i), o.get(), r, comm(), stream_of(i)),
                              "coll_reduce (reduce_scatter to rank " + std::to_string(r) + ")");
                    }
                    s.finish();
                });
        return submit(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", {out},
                      [this, ins, out, op, rop] {
                          at::Tensor flat = flat_cat(ins);
                          if (is_bitwise(rop))
                              return bitwise_into(*comm_, flat, rop, out, getRank() * out.numel());
                          OpFor o(rop, op, out, comm());
                          Staging s("reduce_scatter");
                          at::Tensor b = s.out(out, false);
                          check(coll_reduce_scatter(flat.data_ptr(), b.data_ptr(), b.numel(),
                                                    dtype_of(b), o.get(), comm(), stream_of(b)),
                                "coll_reduce_scatter");
                          s.finish();
                      });
    }

    c10::intrusive_ptr<c10d::Work>
    _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                         const c10d::ReduceScatterOptions &opts) override
    {
        check_world_times(getSize(), input, "input", output, "reduce_scatter_tensor");
        coll_op_t op = op_of(opts.reduceOp, output);
        c10d::ReduceOp rop = opts.reduceOp;
        at::Tensor in = input, out = output;
        return submit(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {out},
                      [this, in, out, op, rop] { scatter_into(*comm_, in, out, op, rop); });
    }

    /* PyTorch 2.x's _coalescing_manager, for reduce_scatter_tensor calls made inside it (see
     * allgather_into_tensor_coalesced) */
    c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
        std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
        const c10d::ReduceScatterOptions &opts = c10d::ReduceScatterOptions())
    {
        TORCH_CHECK(outputs.size() == inputs.size(),
                    "kcoll: reduce_scatter_tensor (coalesced): one output per input");
        for (size_t k = 0; k < inputs.size(); k++) {
            check_world_times(getSize(), inputs[k], "input", outputs[k],
                              "reduce_scatter_tensor (coalesced)");
            (void)op_of(opts.reduceOp, outputs[k]); /* an op the dtype lacks raises here */
        }
        c10d::ReduceOp rop = opts.reduceOp;
        std::vector<at::Tensor> ins = inputs, outs = outputs;
        return submit(KCOLL_TORCH_OPTYPE_COALESCED, "reduce_scatter_tensor (coalesced)", outs,
                      [this, ins, outs, rop] {
                          for (size_t k = 0; k < ins.size(); k++)
                              scatter_into(*comm_, ins[k], outs[k], op_of(rop, outs[k]), rop);
                      });
    }

    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                                 std::vector<int64_t> &outSplits,
                                                 std::vector<int64_t> &inSplits,
                                                 const c10d::AllToAllOptions &) override
    {
        check_tensor(input, "all_to_all_single");
        check_tensor(output, "all_to_all_single");
        TORCH_CHECK(input.scalar_type() == output.scalar_type(),
                    "kcoll: all_to_all_single: input and output of one dtype");
        at::Tensor in = input, out = output;
        if (outSplits.empty() && inSplits.empty()) {
            TORCH_CHECK(in.numel() == out.numel() && in.numel() % getSize() == 0,
                        "kcoll: all_to_all_single: without split sizes input and output have "
                        "the same size, a multiple of world_size (",
                        getSize(), ")");
            return submit(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {out}, [this, in, out] {
                Staging s("all_to_all_single");
                at::Tensor i = s.in(in), o = s.out(out, false);
                const Moved m = moved(i, i.numel() / getSize());
                check(coll_all_to_all(i.data_ptr(), o.data_ptr(), m.count, m.dt, comm(),
                                      stream_of(i)),
                      "coll_all_to_all");
                s.finish();
            });
        }
        std::vector<int64_t> ins = blocks(getSize(), in, inSplits, "input");
        std::vector<int64_t> outs = blocks(getSize(), out, outSplits, "output");
        return submit(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {out},
                      [this, in, out, ins, outs] {
                          int64_t ioff = 0, ooff = 0;
                          in_group("all_to_all_single", [&](Staging &st) {
                              at::Tensor i = st.in(in), o = st.out(out, false);
                              for (int r = 0; r < getSize(); r++) {
                                  at::Tensor s = i.narrow(0, ioff, ins[r]);
                                  at::Tensor d = o.narrow(0, ooff, outs[r]);
                                  ioff += ins[r];
                                  ooff += outs[r];
                                  if (r == getRank())
                                      d.copy_(s);
                                  else {
                                      send1(st, s, r);
                                      recv1(st, d, r);
                                  }
                              }
                          });
                      });
    }

    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                            std::vector<at::Tensor> &inputs,
                                            const c10d::AllToAllOptions &) override
    {
        TORCH_CHECK(outputs.size() == static_cast<size_t>(getSize()) &&
                        inputs.size() == outputs.size(),
                    "kcoll: all_to_all: lists of world_size (", getSize(), ") tensors");
        for (int r = 0; r < getSize(); r++) {
            check_tensor(inputs[r], "all_to_all");
            check_tensor(outputs[r], "all_to_all");
        }
        std::vector<at::Tensor> ins = inputs, outs = outputs;
        return submit(c10d::OpType::ALLTOALL, "all_to_all", outs, [this, ins, outs] {
            in_group("all_to_all", [&](Staging &s) {
                for (int r = 0; r < getSize(); r++) {
                    if (r == getRank()) {
                        outs[r].copy_(ins[r]);
                        continue;
                    }
                    send1(s, ins[r], r);
                    recv1(s, outs[r], r);
                }
            });
        });
    }

    /* The tag travels with the message and is checked against the recv's: messages between two
     * ranks are matched in issue order (as ProcessGroupNCCL's, whose tags are ignored), so a
     * recv that meets another tag raises naming both instead of taking that message's data,
     * which Gloo would have given to the recv of its tag. */
    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst, int tag) override
    {
        at::Tensor t = one_tensor(tensors, "send");
        return p2p(c10d::OpType::SEND, "send to rank " + std::to_string(dst), t,
                   [this, t, dst, tag](Staging &s) { send1(s, t, dst, tag, p2p_comm_->get()); });
    }

    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src, int tag) override
    {
        at::Tensor t = one_tensor(tensors, "recv");
        return p2p(
            c10d::OpType::RECV, "recv from rank " + std::to_string(src), t,
            [this, t, src, tag](Staging &s) { recv1(s, t, src, tag, p2p_comm_->get()); }, src);
    }

    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &, int) override
    {
        TORCH_CHECK(false, "kcoll: recv from any source is not supported (coll.h matches "
                           "receives by peer); pass src");
    }

    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &) override
    {
        return submit(c10d::OpType::BARRIER, "barrier", {}, [this] {
            int32_t one = 1;
            check(coll_all_reduce(&one, &one, 1, COLL_INT32, COLL_SUM, comm(), nullptr),
                  "coll_all_reduce (barrier)");
        });
    }

    /* batch_isend_irecv: the sends and receives between start and end run as one coll group,
     * so that any exchange pattern completes. */
    void startCoalescing() override
    {
        std::lock_guard<std::mutex> lock(cmutex_);
        TORCH_CHECK(!coalescing_, "kcoll: coalescing started twice");
        coalescing_ = true;
    }

    KCOLL_TORCH_COALESCE_RET endCoalescing(KCOLL_TORCH_COALESCE_ARG) override
    {
        std::vector<Pending> batch;
        {
            std::lock_guard<std::mutex> lock(cmutex_);
            TORCH_CHECK(coalescing_, "kcoll: endCoalescing without startCoalescing");
            coalescing_ = false;
            batch.swap(pending_);
        }
        std::vector<c10::intrusive_ptr<Work>> works;
        std::vector<at::Tensor> outs;
        std::vector<std::function<void(Staging &)>> fns;
        for (auto &p : batch) {
            works.push_back(p.work);
            fns.push_back(std::move(p.fn));
            auto r = p.work->result();
            outs.insert(outs.end(), r.begin(), r.end());
        }
        auto whole =
            make_work(KCOLL_TORCH_OPTYPE_COALESCED, "coalesced send/recv", outs, p2p_comm_);
        works.push_back(whole);
        const auto stream = stream_for(outs.empty() ? at::Tensor() : outs[0]);
        if (!stream) /* host tensors: posted together, as requests */
            p2p_worker_->enqueue_p2p(
                works,
                [fns](Staging &s) {
                    for (const auto &f : fns)
                        f(s);
                },
                stream);
        else
            p2p_worker_->enqueue(
                works,
                [this, fns] {
                    in_group("coalesced send/recv", [&](Staging &s) {
                        for (const auto &f : fns)
                            f(s);
                    });
                },
                stream);
#if TORCH_VERSION_MAJOR >= 2
        return whole;
#else
        (void)reqs; /* every Work in reqs is one of those just queued */
#endif
    }

  private:
    struct Pending {
        c10::intrusive_ptr<Work> work;
        std::function<void(Staging &)> fn;
    };

    coll_comm_t comm() const
    {
        return comm_->get();
    }

    /* gather (to_root) and scatter: the root exchanges one tensor with every other rank, in one
     * group; its own is copied. */
    void rooted(int root, const at::Tensor &mine, const std::vector<at::Tensor> &at_root,
                bool to_root)
    {
        in_group(to_root ? "gather" : "scatter", [&](Staging &s) {
            if (getRank() != root) {
                if (to_root)
                    send1(s, mine, root);
                else
                    recv1(s, mine, root);
                return;
            }
            for (int r = 0; r < getSize(); r++) {
                if (r == getRank())
                    (to_root ? at_root[r] : mine).copy_(to_root ? mine : at_root[r]);
                else if (to_root)
                    recv1(s, at_root[r], r);
                else
                    send1(s, at_root[r], r);
            }
        });
    }

    /* In a group (st's copies of strided tensors live until it ends), or posted as a request
     * kept in st (st.posting()); on via, the group's communicator when null */
    void send1(Staging &st, const at::Tensor &t, int peer, int tag = 0, coll_comm_t via = nullptr)
    {
        one_way(st, st.in(t), true, peer, tag, via ? via : comm());
    }

    void recv1(Staging &st, const at::Tensor &t, int peer, int tag = 0, coll_comm_t via = nullptr)
    {
        one_way(st, st.out(t, false), false, peer, tag, via ? via : comm());
    }

    static void one_way(Staging &st, const at::Tensor &b, bool send, int peer, int tag,
                        coll_comm_t c)
    {
        const Moved m = moved(b, b.numel());
        const std::string what =
            std::string(send ? "send to rank " : "recv from rank ") + std::to_string(peer);
        if (st.posting()) {
            coll_request_t q = nullptr;
            check(send ? coll_isend(b.data_ptr(), m.count, m.dt, peer, tag, c, &q)
                       : coll_irecv(b.data_ptr(), m.count, m.dt, peer, tag, c, &q),
                  "coll_i" + what);
            st.add_request(q);
            return;
        }
        check(send ? coll_send_tagged(b.data_ptr(), m.count, m.dt, peer, tag, c, stream_of(b))
                   : coll_recv_tagged(b.data_ptr(), m.count, m.dt, peer, tag, c, stream_of(b)),
              "coll_" + what);
    }

    /* on: the communicator its job runs on (the group's when null) */
    c10::intrusive_ptr<Work> make_work(c10d::OpType type, const std::string &name,
                                       std::vector<at::Tensor> outs,
                                       const std::shared_ptr<Comm> &on = nullptr)
    {
        return c10::make_intrusive<Work>(getRank(), type, std::move(outs), timeout_,
                                         on ? on : comm_, name);
    }

    /* source: the peer of a recv (Work.source_rank()), -1 for a send */
    c10::intrusive_ptr<c10d::Work> p2p(c10d::OpType type, const std::string &name,
                                       const at::Tensor &t, std::function<void(Staging &)> fn,
                                       int source = -1)
    {
        std::lock_guard<std::mutex> lock(cmutex_);
        auto w = make_work(type, name, {t}, p2p_comm_);
        w->set_source(source);
        if (!coalescing_) {
            p2p_worker_->enqueue_p2p({w}, std::move(fn), stream_for(t),
                                     type == c10d::OpType::SEND && t.nbytes() <= kSmallSend);
            return w;
        }
        pending_.push_back(Pending{w, std::move(fn)});
        return w;
    }

    /* ref: the tensor whose device the job runs on when outs is empty (gather off the root) */
    c10::intrusive_ptr<c10d::Work> submit(c10d::OpType type, const char *name,
                                          std::vector<at::Tensor> outs, std::function<void()> fn,
                                          const at::Tensor &ref = at::Tensor())
    {
        auto stream = stream_for(outs.empty() ? ref : outs[0]);
        auto w = make_work(type, name, std::move(outs));
        worker_->enqueue({w}, std::move(fn), stream);
        p2p_worker_->release_held(); /* the small sends held before it go */
        return w;
    }

    /* A job on device tensors runs on the stream that was current on the calling thread when it
     * was issued (the worker makes it current), so that it is ordered after the kernels that
     * produced its inputs and before those that use its outputs. */
    static c10::optional<c10::Stream> stream_for(const at::Tensor &t)
    {
#if defined(KCOLL_TORCH_CUDA)
        if (t.defined() && t.is_cuda())
            return c10::cuda::getCurrentCUDAStream(t.device().index()).unwrap();
#endif
        (void)t;
        return c10::nullopt;
    }

    /* time left until end, none once it passed */
    static std::chrono::milliseconds left_until(std::chrono::steady_clock::time_point end)
    {
        const auto now = std::chrono::steady_clock::now();
        return now >= end ? std::chrono::milliseconds(0)
                          : std::chrono::duration_cast<std::chrono::milliseconds>(end - now);
    }

    std::shared_ptr<Comm> comm_;
    std::shared_ptr<Comm> p2p_comm_; /* send, recv and batch_isend_irecv */
    std::chrono::milliseconds timeout_;
    std::mutex cmutex_;
    bool coalescing_ = false;
    std::vector<Pending> pending_;
    /* last: their threads start in the constructor and run jobs that use the members above */
    std::unique_ptr<Worker> worker_;     /* the collectives, on comm_ */
    std::unique_ptr<Worker> p2p_worker_; /* the point-to-point calls, on p2p_comm_ */
};

/* The process's live groups, for shutdown_all (weak: a destroyed group leaves by itself); the
 * one process-wide state of the extension, as the interpreter's exit is the process's. */
static std::mutex live_mutex;
static std::vector<c10::weak_intrusive_ptr<ProcessGroupKcoll>> live;

static c10::intrusive_ptr<KCOLL_TORCH_BASE> create(std::shared_ptr<Comm> comm, double timeout_s)
{
    TORCH_CHECK(comm && !comm->aborted(), "kcoll: no communicator (it was aborted)");
    /* the group's timeout is kcoll's deadline too: a rank that saves a checkpoint for 10 minutes
     * under timeout=timedelta(hours=1) is waited for, not failed at COLL_TIMEOUT's 300 s */
    TORCH_CHECK(coll_comm_set_timeout(comm->get(), group_deadline(timeout_s)) == COLL_SUCCESS,
                "kcoll: ", coll_get_last_error());
    /* The point-to-point calls run on a twin of the communicator (a split that keeps every rank,
     * with its configuration and deadline; its connections open when first used), on a worker
     * of their own. */
    coll_comm_t twin = nullptr;
    coll_result_t r;
    {
        py::gil_scoped_release nogil;
        r = coll_comm_split(comm->get(), 0, comm->rank(), &twin);
    }
    if (r != COLL_SUCCESS) {
        const std::string why = coll_get_last_error(); /* before the abort's own messages */
        comm->abort(); /* the peers that made theirs learn it, instead of waiting */
        TORCH_CHECK(false,
                    "kcoll: coll_comm_split (the group's point-to-point communicator) "
                    "failed: ",
                    coll_get_error_string(r), ": ", why);
    }
    auto p2p = std::make_shared<Comm>(twin);
    comm->pair_with(p2p);
    p2p->pair_with(comm);
    auto ms = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
    auto pg = c10::make_intrusive<ProcessGroupKcoll>(std::move(comm), std::move(p2p), ms);
    std::lock_guard<std::mutex> lock(live_mutex);
    live.erase(std::remove_if(live.begin(), live.end(), [](const auto &w) { return w.expired(); }),
               live.end());
    live.emplace_back(pg);
    return pg;
}

/* The kcoll group behind a backend object from Python, or a TypeError naming what it is. */
static ProcessGroupKcoll *group_of(const c10::intrusive_ptr<KCOLL_TORCH_BASE> &pg)
{
    auto *k = dynamic_cast<ProcessGroupKcoll *>(pg.get());
    if (k == nullptr)
        throw py::type_error("kcoll: not a kcoll process group (its backend is " +
                             (pg ? pg->getBackendName() : std::string("none")) + ")");
    return k;
}

static void shutdown_group(const c10::intrusive_ptr<KCOLL_TORCH_BASE> &pg)
{
    group_of(pg)->shutdown();
}

static void abort_group(const c10::intrusive_ptr<KCOLL_TORCH_BASE> &pg)
{
    group_of(pg)->abort();
}

/* At the interpreter's exit (atexit, before it finalizes): every live group's worker stops once
 * its queued jobs ran (within 5 s, else its communicator is aborted; at once when a wait on it
 * was interrupted: the program is leaving because of that Ctrl-C). A worker still running
 * when finalization begins aborts the process: dropping a Python callback (a then() on a Work's
 * future) takes the GIL, and Python ends such a thread by unwinding it through C++ frames that
 * cannot unwind (std::terminate). */
static void shutdown_all()
{
    std::vector<c10::intrusive_ptr<ProcessGroupKcoll>> pgs;
    {
        std::lock_guard<std::mutex> lock(live_mutex);
        for (auto &w : live)
            if (auto pg = w.lock())
                pgs.push_back(std::move(pg));
        live.clear();
    }
    for (auto &pg : pgs)
        pg->stop(pg->interrupted() ? std::chrono::seconds(0) : std::chrono::seconds(5));
}

} // namespace kcoll

PYBIND11_MODULE(_C, m)
{
    m.doc() = "kcoll's torch.distributed backend (C++ over coll.h)";
    /* a wait ended by a Python signal handler: its exception (KeyboardInterrupt) is set already */
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p)
                std::rethrow_exception(p);
        } catch (const kcoll::Interrupted &e) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, e.what());
        }
    });
    py::class_<kcoll::Comm, std::shared_ptr<kcoll::Comm>>(m, "Comm")
        .def_static("init_rank", &kcoll::init_rank, py::arg("unique_id"), py::arg("rank"),
                    py::arg("nranks"), py::arg("timeout_s") = 0.0)
        .def_static("init_agent", &kcoll::init_agent, py::arg("timeout_s") = 0.0)
        .def_property_readonly("rank", &kcoll::Comm::rank)
        .def_property_readonly("size", &kcoll::Comm::size)
        .def("abort", &kcoll::Comm::abort)
        .def("broadcast_bytes", &kcoll::broadcast_bytes, py::arg("data"), py::arg("root"),
             py::arg("length"));
    m.def("unique_id", &kcoll::unique_id, py::arg("timeout_s") = 0.0,
          "a new unique id (this process serves its bootstrap)");
    m.def("create", &kcoll::create, py::arg("comm"), py::arg("timeout_s"),
          "the process group on a communicator");
    m.def("time_all_reduce", &kcoll::time_all_reduce, py::arg("comm"), py::arg("tensor"),
          py::arg("iters"), "seconds per coll_all_reduce call, from C (the benchmark's reference)");
    m.def("library_version", [] { return std::string(coll_get_version_string()); });
    m.def("shutdown_group", &kcoll::shutdown_group, py::arg("backend"),
          py::call_guard<py::gil_scoped_release>(),
          "end a kcoll group: its queued work runs, then new work raises (kcoll.shutdown)");
    m.def("abort_group", &kcoll::abort_group, py::arg("backend"),
          py::call_guard<py::gil_scoped_release>(),
          "abort a kcoll group: its calls fail now, here and on its peers (kcoll.abort)");
    m.def("shutdown_all", &kcoll::shutdown_all, py::call_guard<py::gil_scoped_release>(),
          "stop every live group's worker (the package calls it at exit)");
    m.def(
        "log_text", [](const std::string &text) { coll_log_text(text.c_str()); }, py::arg("text"),
        "one line where kcoll logs (stderr or COLL_DEBUG_FILE)");
    m.attr("HEADER_VERSION") = COLL_VERSION;
    m.attr("TORCH_BUILT_WITH") = TORCH_VERSION;
    m.attr("TORCH_BASE") = KCOLL_TORCH_BASE_NAME;
#if defined(KCOLL_TORCH_CUDA)
    m.attr("CUDA") = true;
#else
    m.attr("CUDA") = false;
#endif
}
