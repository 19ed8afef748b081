/*
 * A worker of a kcoll process group: one thread that runs the group's jobs of one kind (each one
 * or more coll_* calls; collectives on one worker, point-to-point on another) in the order they
 * were issued, the same on every rank, and completes their Work objects. A job on device tensors
 * runs with the stream that was current where it was issued. Point-to-point jobs on host tensors
 * are posted as coll_isend/coll_irecv requests the moment the worker takes them; it then drives
 * every posted request at once (coll_comm_progress) and completes each job when its requests
 * have, in whatever order that happens, as Gloo does.
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

#include "calls.h"
#include "comm.h"
#include "compat.h"
#include "work.h"

namespace kcoll
{

/* How long a point-to-point job is held for the ones after it when nobody waits (enqueue_p2p) */
inline constexpr std::chrono::milliseconds kLinger{10};
/* A send this small goes into the transports' buffers without its recv (shared memory: 512 KiB of
 * ring; sockets: the kernel's buffers): run alone, it cannot wait on an operation issued after it
 * (release_held) */
inline constexpr size_t kSmallSend = 64 * 1024;
/* The longest one coll_comm_progress call waits (a new job or a stop wakes it earlier) */
inline constexpr int kPollMs = 100;

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

    /* A send or recv, or a batch_isend_irecv's (part issues them). On host tensors (no stream)
     * it is posted at once as requests (post()), and completes when they have. On device
     * tensors a send or recv issued alone (isend, irecv, send, recv outside batch_isend_irecv):
     * the worker holds it back, and the ones issued after it on the same stream join it in one
     * coll group, until a wait on (or a look at) one of them, a job of another kind, or
     * kLinger. Gloo's isend does not wait for its recv: in the ring of PyTorch's tutorial
     * (isend to the right, recv from the left, then wait), each rank's send would otherwise
     * wait for a recv its neighbour has queued behind its own send. part runs inside the
     * group, its strided tensors staged in the group's Staging. */
    void enqueue_p2p(std::vector<c10::intrusive_ptr<Work>> works,
                     std::function<void(Staging &)> part, c10::optional<c10::Stream> stream,
                     bool small_send = false);

    /* The group issued a collective (which runs on its other worker): the jobs held so far go
     * now if each is a send of at most kSmallSend bytes (small_send), which cannot wait on an
     * operation issued after it. Before point-to-point had a worker of its own, the collective's
     * job ended every hold, and an isend followed by an all_reduce went at once; with no release
     * it waited the whole kLinger (10 ms a step). A held recv, or a large send, stays held: run
     * alone, it would wait for a peer whose matching operation may come after the collective,
     * behind this one (irecv, all_reduce, send on both ranks). */
    void release_held();

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
        c10::optional<c10::Stream> stream;   /* device jobs: the caller's current stream */
        std::function<void(Staging &)> part; /* a point-to-point job (fn empty) */
        bool post = false;                   /* part posts requests (host tensors) */
        bool small_send = false;             /* part is a send of at most kSmallSend bytes */
        uint64_t seq = 0;                    /* its number, from 1 */
    };

    /* A host point-to-point job whose requests are out: its Works complete once every request
     * has (or the communicator failed). */
    struct Posted {
        std::vector<c10::intrusive_ptr<Work>> works;
        std::unique_ptr<Staging> staging; /* the requests, and the strided tensors' copies */
        std::exception_ptr error;         /* part threw, maybe after posting some requests */
        size_t next = 0;                  /* requests before it are complete */
        uint64_t id = 0;
    };
    /* On the worker: part's requests out now, the job among posted_ until they complete;
     * returns its id */
    uint64_t post(Job &job);
    /* Every posted request forward, for at most kPollMs or until one completes or a job is
     * queued (jobs_first: at once when one is queued already); then the jobs whose requests are
     * all complete complete. */
    void progress(bool jobs_first = true);
    /* Test p's requests: true once all completed, or one failed (p.error set then). */
    bool settle(Posted &p);
    /* p's works complete (with p.error): their callbacks run here */
    void finish(Posted &p);

    void check_issuer(const c10::optional<c10::Stream> &stream) const;
    bool on_worker() const; /* called on the worker's thread */
    void push(Job job);
    void run();
    void execute(Job &job);
    /* first, and the point-to-point jobs that join it, in one group */
    void run_p2p(Job first);
    /* fn, then the works' completion, with stream current */
    void complete_after(const c10::optional<c10::Stream> &stream,
                        const std::vector<c10::intrusive_ptr<Work>> &works,
                        const std::function<void()> &fn);
    std::string why_gone();
    void refuse_if_closed() const; /* under qmutex_ */

    std::shared_ptr<Comm> comm_;
    std::mutex qmutex_;
    std::deque<Job> queue_;
    uint64_t seq_ = 0; /* the last point-to-point job's number (under qmutex_) */
    FlushMark flush_ = std::make_shared<std::atomic<uint64_t>>(0);
    std::atomic<uint64_t> released_{0};                /* seq_ when a collective was last issued */
    RunningNow running_ = std::make_shared<Running>(); /* the job in progress, for messages */
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
    /* Started by the first job (under qmutex_): a group that never sends or receives has no
     * point-to-point thread. A process forked from this one must not hold more threads than it
     * needs: PyTorch 1.13's TCPStore joins its own threads in the child's exit, and glibc unmaps
     * the parent's stacks there once they pass its 40 MiB stack cache (SIGSEGV, not exit 0). */
    std::unique_ptr<std::thread> thread_;
    std::atomic<std::thread::id> id_{}; /* the thread's id, once it runs */
    std::deque<Posted> posted_;         /* the worker's thread alone */
    uint64_t posts_ = 0;                /* the last Posted's id (the worker's thread alone) */
    /* An eventfd that push() and stop() write to, so that the worker, waiting in
     * coll_comm_progress, takes a new job at once; made with the first posted job. */
    std::atomic<int> wake_fd_{-1};
    std::atomic<bool> polling_{false}; /* the worker is in (or entering) coll_comm_progress */
};

} // namespace kcoll

#endif /* KCOLL_TORCH_WORKER_H */
