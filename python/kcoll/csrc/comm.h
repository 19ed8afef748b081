/*
 * The translation layer of kcoll's torch backend: the communicator object that the process
 * groups, their Work objects and Python share, and how tensors, dtypes and reduce ops become
 * coll.h arguments. Errors are thrown as std::runtime_error / c10::Error (RuntimeError in
 * Python) carrying coll_get_last_error()'s message.
 */
#ifndef KCOLL_TORCH_COMM_H
#define KCOLL_TORCH_COMM_H

#include <pybind11/pybind11.h>
#include <torch/python.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "coll.h"
#include "compat.h"

namespace kcoll
{

/* Throw a RuntimeError naming what failed, with r's string and kcoll's last error message. */
[[noreturn]] void fail(const std::string &what, coll_result_t r);
void check(coll_result_t r, const std::string &what);

/* The communicator, shared by the process group, its Work objects and Python. Aborting it is
 * the one thing that may happen from another thread while the worker is inside a call. */
class Comm
{
  public:
    explicit Comm(coll_comm_t c) : comm_(c)
    {
        try {
            check(coll_comm_user_rank(c, &rank_), "coll_comm_user_rank");
            check(coll_comm_count(c, &size_), "coll_comm_count");
        } catch (...) {
            (void)coll_comm_destroy(c); /* the destructor does not run: a constructor threw */
            throw;
        }
    }
    /* In a process forked from the one that made it (a child leaving through the interpreter's
     * exit), the communicator is the parent's: it is left alone, not destroyed or aborted, which
     * would tell the peers it ended. */
    ~Comm()
    {
        if (getpid() == pid_ && !gone_.exchange(true))
            (void)coll_comm_destroy(comm_); /* nothing to report to from a destructor */
    }
    Comm(const Comm &) = delete;
    Comm &operator=(const Comm &) = delete;

    coll_comm_t get() const
    {
        return comm_;
    }
    int rank() const
    {
        return rank_;
    }
    int size() const
    {
        return size_;
    }
    bool aborted() const
    {
        return gone_.load();
    }
    /* A wait on this communicator was ended by a Python signal handler (Ctrl-C) */
    void mark_interrupted()
    {
        interrupted_.store(true);
    }
    bool interrupted() const
    {
        return interrupted_.load();
    }
    /* Abort it, and its twin (pair_with): whichever the wait that timed out was on, the group's
     * calls of both kinds stop, here and on the peers. */
    void abort()
    {
        if (getpid() != pid_ || gone_.exchange(true))
            return;
        (void)coll_comm_abort(comm_); /* the communicator is gone whatever it returns */
        if (auto t = twin_.lock())
            t->abort();
    }
    /* The group's other communicator (its point-to-point one, or its collectives' one), which
     * abort() aborts too. Set once, before either is used. */
    void pair_with(const std::shared_ptr<Comm> &twin)
    {
        twin_ = twin;
    }
    /* Let the communicator go now, not when the last owner does (a group shut down); then
     * aborted() is true. */
    void destroy()
    {
        if (getpid() == pid_ && !gone_.exchange(true))
            (void)coll_comm_destroy(comm_); /* nothing to report to: the group ended */
    }

  private:
    coll_comm_t comm_;
    pid_t pid_ = getpid(); /* the process that made it */
    int rank_ = 0;
    int size_ = 0;
    std::atomic<bool> gone_{false};
    std::atomic<bool> interrupted_{false};
    std::weak_ptr<Comm> twin_; /* weak: the two hold no cycle */
};

/* A group's timeout as kcoll's deadline or bound (seconds): PyTorch's "for ever"
 * (timedelta.max, over a year), or none given, is none (0). */
inline double group_deadline(double timeout_s)
{
    return timeout_s > 0 && timeout_s < 86400.0 * 365 ? timeout_s : 0;
}

/* Create this process's member (GIL released while it waits for the other ranks); timeout_s
 * (> 0): the group's timeout, which bounds the creation where shorter than
 * COLL_BOOTSTRAP_TIMEOUT. */
std::shared_ptr<Comm> init_rank(const std::string &uid, int rank, int nranks, double timeout_s);
/* The pod's member from its kcoll agent, its creation bounded as init_rank's. */
std::shared_ptr<Comm> init_agent(double timeout_s);
/* A new unique id's printable form (this process serves its bootstrap, for at most timeout_s
 * where shorter than COLL_BOOTSTRAP_TIMEOUT; 0: no bound of its own). */
std::string unique_id(double timeout_s);
/* Root's bytes (at most len) on every rank, padded with NULs to len. */
pybind11::bytes broadcast_bytes(const std::shared_ptr<Comm> &comm, const std::string &data,
                                int root, size_t len);
/* Seconds per coll_all_reduce call (float32 sum, in place), iters calls from C. */
double time_all_reduce(const std::shared_ptr<Comm> &comm, at::Tensor t, int iters);

coll_datatype_t dtype_of(const at::Tensor &t);
/* For an operation that only moves data (broadcast, gathers, all_to_all, send/recv): count
 * elements of t in kcoll's datatype where it has one, else as bytes (complex, int16, ...:
 * nothing computes on them, as Gloo moves them). */
struct Moved {
    coll_datatype_t dt;
    size_t count;
};
Moved moved(const at::Tensor &t, size_t count);
/* The coll op for rop on t's dtype (PREMUL_SUM: the base SUM; OpFor makes the real one). */
coll_op_t op_of(const c10d::ReduceOp &rop, const at::Tensor &t);

/* BAND, BOR, BXOR: in neither coll.h nor NCCL; Gloo has them for integer tensors. */
bool is_bitwise(const c10d::ReduceOp &op);

/* The operator of one collective: op itself, or for PREMUL_SUM (sum of factor * x) a PreMulSum
 * operator of coll.h with the factor in t's dtype, made for this call and freed after it (on the
 * worker, the one thread that runs the group's collectives). */
class OpFor
{
  public:
    OpFor(const c10d::ReduceOp &rop, coll_op_t op, const at::Tensor &t, coll_comm_t comm);
    ~OpFor();
    OpFor(const OpFor &) = delete;
    OpFor &operator=(const OpFor &) = delete;
    coll_op_t get() const
    {
        return op_;
    }

  private:
    coll_op_t op_;
    coll_comm_t comm_;
    bool made_ = false;
};

/* The tensors' elements one after the other, in a new 1-d tensor. */
at::Tensor flat_cat(const std::vector<at::Tensor> &ts);
/* Strided (any strides: see Staging), on a device this build handles; else a RuntimeError. */
void check_tensor(const at::Tensor &t, const char *op);

/* coll.h takes buffers of elements in order; a tensor that is not contiguous (channels_last, a
 * transposed or sliced view: Gloo takes them all) goes through a contiguous copy, made on the
 * job's stream, and an output's copy is written back by finish(). The copies live as long as
 * this object: past the coll group that uses them. */
class Staging
{
  public:
    explicit Staging(const char *op) : op_(op) {}
    ~Staging();
    Staging(const Staging &) = delete;
    Staging &operator=(const Staging &) = delete;
    /* t's elements in order: t itself when contiguous */
    at::Tensor in(const at::Tensor &t);
    /* the buffer for t's result, holding t's elements where keep (an in-place call); written
     * back into t by finish(). An output whose elements share memory (an expand()ed view) is
     * refused: the result would not fit in it. */
    at::Tensor out(const at::Tensor &t, bool keep = true);
    /* every output's copy into its tensor, once the calls that fill them returned */
    void finish();

    /* A point-to-point job on host tensors: its sends and receives are posted as coll_isend /
     * coll_irecv requests, kept here (freed with this object), not made inside a group. */
    void post_requests()
    {
        posting_ = true;
    }
    bool posting() const
    {
        return posting_;
    }
    void add_request(coll_request_t r)
    {
        requests_.push_back(r);
    }
    const std::vector<coll_request_t> &requests() const
    {
        return requests_;
    }

  private:
    const char *op_;
    std::vector<at::Tensor> keep_;                        /* the copies of inputs */
    std::vector<std::pair<at::Tensor, at::Tensor>> back_; /* (tensor, its copy) */
    bool posting_ = false;
    std::vector<coll_request_t> requests_;
};
/* The one tensor of a one-element list, checked. */
at::Tensor one_tensor(const std::vector<at::Tensor> &ts, const char *op);
/* The stream a device buffer's call is ordered on: PyTorch's current one; NULL for host. */
coll_stream_t stream_of(const at::Tensor &t);

} // namespace kcoll

#endif /* KCOLL_TORCH_COMM_H */
