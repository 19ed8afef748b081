/*
 * The worker of a kcoll process group: one thread that runs the group's jobs (each one or more
 * coll_* calls) in the order they were issued, the same on every rank, and completes their Work
 * objects. A job on device tensors runs with the stream that was current where it was issued.
 */
#ifndef KCOLL_TORCH_WORKER_H
#define KCOLL_TORCH_WORKER_H

#include <torch/python.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "comm.h"
#include "compat.h"
#include "work.h"

namespace kcoll
{

class Worker
{
  public:
    explicit Worker(std::shared_ptr<Comm> comm);
    /* every queued job runs first (stop_releasing_gil()) */
    ~Worker();
    Worker(const Worker &) = delete;
    Worker &operator=(const Worker &) = delete;

    /* Queue fn, whose end completes works (with fn's exception, if it threw). stream: the
     * stream a device job is ordered on (the issuing thread's current one). Refused (raises)
     * when the worker was closed, in a forked child, and on a stream capturing a CUDA graph.
     * Issued on the worker itself (a completion's callback), fn runs at once. */
    void enqueue(std::vector<c10::intrusive_ptr<Work>> works, std::function<void()> fn,
                 c10::optional<c10::Stream> stream);

    /* Stop once the queued jobs ran; if they have not within grace (a job waits on peers that
     * are gone or exiting), abort the communicator so that they fail now. Idempotent. Called
     * without the GIL: a job's callback may need it. */
    void stop(std::chrono::milliseconds grace);
    /* stop(grace), with the GIL released if this thread holds it */
    void stop_releasing_gil(std::chrono::milliseconds grace = std::chrono::hours{24 * 365});

    /* The first call wins: new work is refused, saying the group was `how`. */
    void close(const char *how);

  private:
    struct Job {
        std::vector<c10::intrusive_ptr<Work>> works;
        std::function<void()> fn;
        c10::optional<c10::Stream> stream; /* device jobs: the caller's current stream */
    };

    void run();
    void execute(Job &job);
    std::string why_gone();
    void refuse_if_closed() const; /* under qmutex_ */

    std::shared_ptr<Comm> comm_;
    std::mutex qmutex_;
    std::deque<Job> queue_;
    std::atomic<size_t> queued_{0}; /* queue_.size(), read without the lock while spinning */
    bool stop_ = false;
    std::string closed_;  /* why new work is refused: shut down or aborted ("": open) */
    bool exited_ = false; /* the thread left run() (under qmutex_) */
    struct Signals {
        std::condition_variable job;    /* a job was queued, or stop_ set */
        std::condition_variable exited; /* exited_ set */
    };
    std::unique_ptr<Signals> cv_ = std::make_unique<Signals>(); /* leaked in a forked child */
    pid_t pid_ = getpid();                                      /* the process of the thread */
    /* last: it starts in the constructor and uses the members above */
    std::unique_ptr<std::thread> thread_;
};

} // namespace kcoll

#endif /* KCOLL_TORCH_WORKER_H */
