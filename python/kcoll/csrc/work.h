/* The Work of kcoll's process group: it completes when the worker's job for it returned; a
 * wait has a deadline, after which the communicator is aborted. */
#ifndef KCOLL_TORCH_WORK_H
#define KCOLL_TORCH_WORK_H

#include <torch/python.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm.h"
#include "compat.h"

namespace kcoll
{

/* A caller waiting for a Work, and the idle worker waiting for a job, poll this long before they
 * sleep: two thread wake-ups cost tens of microseconds on a small VM, more than a small
 * collective (libcoll spins the same way, COLL_SPIN_US). */
inline constexpr std::chrono::microseconds kSpin{50};

template <typename Pred> bool spin_until(Pred ready)
{
    auto end = std::chrono::steady_clock::now() + kSpin;
    while (!ready()) {
        if (std::chrono::steady_clock::now() >= end)
            return false;
        std::this_thread::yield();
    }
    return true;
}

/* How often a waiting caller lets Python run its signal handlers, and the longest wait kept as
 * a deadline (a longer timeout is a wait without one). */
inline constexpr std::chrono::milliseconds kSignalPoll{100};
inline constexpr std::chrono::hours kLongestWait{24 * 365 * 10};

/* A wait that a Python signal handler ended (Ctrl-C): the handler's exception (KeyboardInterrupt)
 * is set in the waiting thread's state, and this exception carries it out through PyTorch's
 * binding (its translator is registered in backend.cpp; without it, a RuntimeError). */
struct Interrupted : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/* Run Python's pending signal handlers (they run on the main thread only); true when one raised,
 * its exception left set. Never while the interpreter is finalizing (taking the GIL then ends the
 * thread). */
inline bool python_signal_raised()
{
#if PY_VERSION_HEX >= 0x030D0000
    const bool finalizing = Py_IsFinalizing();
#else
    const bool finalizing = _Py_IsFinalizing();
#endif
    if (!Py_IsInitialized() || finalizing)
        return false;
    pybind11::gil_scoped_acquire gil;
    return PyErr_CheckSignals() != 0;
}

/* The CUDA devices of ts, once each: a future over them is CUDA-aware (its completion records
 * an event on each device's current stream, and a callback chained with then() runs with its
 * streams waiting for those events), as ProcessGroupNCCL's futures are. */
inline std::vector<c10::Device> cuda_devices(const std::vector<at::Tensor> &ts)
{
    std::vector<c10::Device> d;
    for (const auto &t : ts)
        if (t.defined() && t.is_cuda() && std::find(d.begin(), d.end(), t.device()) == d.end())
            d.push_back(t.device());
    return d;
}

/* Where a worker holds a point-to-point job back for the ones issued after it (worker.h): the
 * highest sequence number of a held job somebody waits for. */
using FlushMark = std::shared_ptr<std::atomic<uint64_t>>;

class Work;

/* The Works of the job a worker runs now (null between jobs), for the timeout message of a Work
 * queued behind it; only such a message reads them. Shared: a Work may outlive its worker. */
struct Running {
    std::mutex m;
    const std::vector<c10::intrusive_ptr<Work>> *works = nullptr;
};
using RunningNow = std::shared_ptr<Running>;

class Work : public c10d::Work
{
  public:
    Work(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
         std::chrono::milliseconds timeout, std::shared_ptr<Comm> comm, std::string name)
        : c10d::Work(rank, type), outputs_(std::move(outputs)), timeout_(timeout),
          comm_(std::move(comm)), name_(std::move(name)),
          future_(c10::make_intrusive<c10::ivalue::Future>(
              c10::ListType::create(c10::TensorType::get()), cuda_devices(outputs_)))
    {
    }

    /* A recv's peer, for Work.source_rank() (c10d's refuses on any other Work). */
    void set_source(int rank)
    {
        source_ = rank;
    }

    int sourceRank() const override
    {
        return source_ >= 0 ? source_ : c10d::Work::sourceRank();
    }

    void complete(std::exception_ptr e)
    {
        /* the future first: a DDP callback chained on it must see the result */
        if (e)
            future_->setError(e);
        else
            future_->markCompleted(c10::IValue(outputs_));
        finish(e);
        done_.store(true, std::memory_order_release);
    }

    /* A point-to-point job's Work: a wait on it (or a look at it) ends the worker's wait for
     * more of them (Worker::enqueue_p2p). */
    void flush_on_wait(FlushMark mark, uint64_t seq)
    {
        mark_ = std::move(mark);
        seq_ = seq;
    }

    /* Queued on a worker that says what it runs in running (before the job is run) */
    void queued_on(RunningNow running)
    {
        running_ = std::move(running);
    }
    /* The worker began this Work's job */
    void mark_started()
    {
        started_.store(true, std::memory_order_release);
    }

    bool isCompleted() override
    {
        flush();
        return c10d::Work::isCompleted();
    }

    bool wait(std::chrono::milliseconds timeout) override
    {
        flush();
        auto limit = timeout.count() == 0 ? timeout_ : timeout; /* 0: kNoTimeout */
        /* complete() completes the future first: a then() callback that waits for this very
         * Work runs on the worker before finish(), and its result is there already */
        if (future_->completed()) {
            if (future_->hasError())
                std::rethrow_exception(future_->exception_ptr());
            future_->wait(); /* CUDA: the current streams wait for the call */
            return true;
        }
        spin_until([this] { return done_.load(std::memory_order_acquire); });
        /* in slices, between which Python's signal handlers run: Ctrl-C (KeyboardInterrupt)
         * ends the wait, as it ends a time.sleep; the call itself goes on, in order */
        const auto end = std::chrono::steady_clock::now() +
                         std::min<std::chrono::milliseconds>(limit, kLongestWait);
        /* the base's mutex: std::mutex in 1.13 and 2.11, std::timed_mutex in some 2.x between */
        std::unique_lock<decltype(mutex_)> lock(mutex_);
        while (!completed_) {
            const auto now = std::chrono::steady_clock::now();
            if (now >= end) {
                lock.unlock();
                const std::string behind = queued_behind(); /* before the abort ends it */
                comm_->abort();
                TORCH_CHECK(false, "kcoll: ", name_, " on rank ", rank_,
                            " did not complete within ", limit.count(), " ms",
                            behind.empty() ? waited_on() : behind,
                            "; the communicator is aborted (a peer that is late, stuck or did "
                            "not call the same collective)");
            }
            if (cv_.wait_for(lock,
                             std::min<std::chrono::steady_clock::duration>(end - now, kSignalPoll),
                             [this] { return completed_; }))
                break;
            lock.unlock();
            if (python_signal_raised()) {
                comm_->mark_interrupted();
                throw Interrupted("kcoll: " + name_ + " on rank " + std::to_string(rank_) +
                                  ": the wait was interrupted by a signal; the call goes on, "
                                  "in order with this group's others");
            }
            lock.lock();
        }
        if (exception_)
            std::rethrow_exception(exception_);
        /* CUDA tensors: the current streams wait for the call (its event, recorded after the
         * gate on the call's stream), as ProcessGroupNCCL's wait does; no-op on the CPU */
        future_->wait();
        return true;
    }

    std::vector<at::Tensor> result() override
    {
        return outputs_;
    }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override
    {
        flush();
        return future_;
    }

  private:
    /* A job not begun: what its worker runs instead, which it waits behind (a held recv that runs
     * alone keeps the sends issued after it waiting: docs/torch.md) */
    std::string queued_behind()
    {
        if (started_.load(std::memory_order_acquire) || !running_)
            return "";
        std::string what;
        bool p2p = false;
        {
            std::lock_guard<std::mutex> lock(running_->m);
            for (size_t i = 0; running_->works && i < running_->works->size(); i++) {
                Work &w = *(*running_->works)[i];
                const auto type = w.retrieveOpType();
                if (type == KCOLL_TORCH_OPTYPE_COALESCED) /* a batch's whole: its parts are named */
                    continue;
                what += (what.empty() ? "" : ", ") + w.name_;
                p2p = p2p || type == c10d::OpType::SEND || type == c10d::OpType::RECV;
            }
        }
        if (what.empty())
            return "";
        return "; it had not started: it was queued behind " + what + ", still in progress" +
               (p2p ? " (a send or recv that runs alone waits for its peer before the ones "
                      "issued after it; issue such an exchange as one batch_isend_irecv)"
                    : "");
    }

    /* After the abort in wait: whom the job's call still waited on, as its error says (", waiting
     * on rank 1 (pid ... on host, address)"); the abort stopped the call already, and its Work
     * completes within moments. Empty when the job had not started, did not say, or failed on a
     * peer's report first. */
    std::string waited_on()
    {
        std::unique_lock<decltype(mutex_)> lock(mutex_);
        if (!cv_.wait_for(lock, kSignalPoll, [this] { return completed_; }) || !exception_)
            return "";
        std::string msg;
        try {
            std::rethrow_exception(exception_);
        } catch (const std::exception &e) {
            msg = e.what();
        }
        /* this rank's own call's words, not a peer's report quoted in them ("rank 0 reported:
         * ... waiting on rank 1"), which would name this very rank when both time out at once */
        const std::string mark = "in progress, ";
        const size_t at = msg.find(mark + "waiting on ");
        if (at == std::string::npos || msg.rfind(" reported: ", at) != std::string::npos)
            return "";
        return ", " + msg.substr(at + mark.size());
    }

    void flush()
    {
        if (!mark_ || done_.load(std::memory_order_acquire))
            return;
        uint64_t m = mark_->load(std::memory_order_relaxed);
        while (m < seq_ && !mark_->compare_exchange_weak(m, seq_, std::memory_order_release,
                                                         std::memory_order_relaxed)) {
        }
    }

    FlushMark mark_;
    uint64_t seq_ = 0;
    std::vector<at::Tensor> outputs_;
    std::chrono::milliseconds timeout_;
    std::shared_ptr<Comm> comm_;
    std::string name_;
    int source_ = -1; /* set_source */
    RunningNow running_;
    std::atomic<bool> started_{false};
    c10::intrusive_ptr<c10::ivalue::Future> future_;
    std::atomic<bool> done_{false};
};

} // namespace kcoll

#endif
