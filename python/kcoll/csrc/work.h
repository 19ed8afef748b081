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

    bool wait(std::chrono::milliseconds timeout) override
    {
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
        std::unique_lock<std::mutex> lock(mutex_);
        if (!cv_.wait_for(lock, limit, [this] { return completed_; })) {
            lock.unlock();
            comm_->abort();
            TORCH_CHECK(false, "kcoll: ", name_, " on rank ", rank_, " did not complete within ",
                        limit.count(),
                        " ms; the communicator is aborted (a peer that is late, "
                        "stuck or did not call the same collective)");
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
        return future_;
    }

  private:
    std::vector<at::Tensor> outputs_;
    std::chrono::milliseconds timeout_;
    std::shared_ptr<Comm> comm_;
    std::string name_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
    std::atomic<bool> done_{false};
};

} // namespace kcoll

#endif
