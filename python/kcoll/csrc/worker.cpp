/* The worker of a kcoll process group (worker.h). */
#include "worker.h"

#include <c10/core/StreamGuard.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <utility>

#include <sys/eventfd.h>

namespace kcoll
{

Worker::Worker(std::shared_ptr<Comm> comm) : comm_(std::move(comm)) {}

bool Worker::on_worker() const
{
    return std::this_thread::get_id() == id_.load(std::memory_order_acquire);
}

Worker::~Worker()
{
    stop_releasing_gil(); /* every queued job runs, as before */
    const int fd = wake_fd_.load();
    if (fd >= 0 && getpid() == pid_)
        (void)::close(fd);
}

/* Wake the worker from coll_comm_progress (nothing to do before its first posted job) */
static void wake(const std::atomic<int> &fd)
{
    const int f = fd.load(std::memory_order_acquire);
    const uint64_t one = 1;
    if (f >= 0 && write(f, &one, sizeof(one)) < 0 && errno != EAGAIN) {
        /* nothing to report: the worker's poll ends within kPollMs anyway */
    }
}

void Worker::stop(std::chrono::milliseconds grace)
{
    if (getpid() != pid_) {
        /* a forked child: the thread is the parent's, not in this process, and it may have
         * been waiting on a condition variable at the fork; glibc's destroy (and notify) of
         * one waits for its waiters to leave, which never happens here. Both are left as they
         * are (the child ends soon; enqueue refuses work here). */
        (void)thread_.release();
        (void)cv_.release();
        return;
    }
    std::unique_lock<std::mutex> lock(qmutex_);
    stop_ = true;
    cv_->job.notify_all();
    wake(wake_fd_);
    if (!thread_ || !thread_->joinable() || on_worker())
        return;
    const bool ran = cv_->exited.wait_for(lock, grace, [this] { return exited_; });
    lock.unlock();
    if (!ran)
        comm_->abort();
    thread_->join();
}

void Worker::stop_releasing_gil(std::chrono::milliseconds grace)
{
    if (Py_IsInitialized() && PyGILState_Check()) {
        pybind11::gil_scoped_release nogil;
        stop(grace);
    } else {
        stop(grace);
    }
}

/* Refused before anything is queued: a stream capturing a CUDA graph, a forked child. */
void Worker::check_issuer(const c10::optional<c10::Stream> &stream) const
{
#if defined(KCOLL_TORCH_CUDA)
    /* the worker makes the call later, maybe after the capture ended: refused, and nothing is
     * enqueued on the capturing stream */
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    TORCH_CHECK(!stream || (cudaStreamIsCapturing(c10::cuda::CUDAStream(*stream).stream(), &st) ==
                                cudaSuccess &&
                            st == cudaStreamCaptureStatusNone),
                "kcoll: a collective on a stream that is capturing a CUDA graph: the kcoll "
                "backend makes its calls on a worker thread, which cannot put them in the "
                "graph; for CUDA graphs use backend=\"nccl\" with kcoll's libnccl.so.2 "
                "preloaded (its calls are captured), or make this call outside the capture");
#else
    (void)stream;
#endif
    TORCH_CHECK(getpid() == pid_, "kcoll: this process group was made by process ", pid_,
                "; this process (", getpid(),
                ") was forked from it and cannot use it (its worker and connections stay in "
                "the parent). Make collectives in the parent, or start workers with the "
                "'spawn' start method and a group of their own");
}

void Worker::enqueue(std::vector<c10::intrusive_ptr<Work>> works, std::function<void()> fn,
                     c10::optional<c10::Stream> stream)
{
    check_issuer(stream);
    Job job;
    job.works = std::move(works);
    job.fn = std::move(fn);
    job.stream = stream;
    push(std::move(job));
}

void Worker::enqueue_p2p(std::vector<c10::intrusive_ptr<Work>> works,
                         std::function<void(Staging &)> part, c10::optional<c10::Stream> stream,
                         bool small_send)
{
    check_issuer(stream);
    Job job;
    job.works = std::move(works);
    job.stream = stream;
    job.small_send = small_send;
    job.post = !stream.has_value();
    if (on_worker() && !job.post) { /* a callback's: at once (push) */
        job.fn = [part] { in_group("send/recv", part); };
    } else {
        job.part = std::move(part);
    }
    push(std::move(job));
}

void Worker::release_held()
{
    {
        std::lock_guard<std::mutex> lock(qmutex_);
        released_.store(seq_, std::memory_order_release);
    }
    cv_->job.notify_all();
}

void Worker::push(Job job)
{
    /* Issued by a callback that a completion runs on the worker (a then() callback on a Work's
     * future that issues a collective and waits for it, as PowerSGD's comm hook does): queued,
     * it would wait for the worker that waits for it. It runs here and now, right after the job
     * whose completion called it: that position is the same on every rank, as the issue order
     * is. */
    if (on_worker()) {
        {
            std::lock_guard<std::mutex> lock(qmutex_);
            refuse_if_closed();
        }
        if (!job.post) {
            execute(job);
            return;
        }
        /* its Works complete before this returns, as a job run at once would: the caller may
         * wait for them here, on the one thread that moves them */
        const uint64_t id = post(job);
        while (std::any_of(posted_.begin(), posted_.end(),
                           [id](const Posted &p) { return p.id == id; }))
            progress(false); /* the queued jobs wait for this callback to return */
        return;
    }
    {
        std::lock_guard<std::mutex> lock(qmutex_);
        refuse_if_closed(); /* checked where it is queued: none is queued after the stop */
        if (job.part && !job.post) {
            job.seq = ++seq_;
            for (auto &w : job.works)
                w->flush_on_wait(flush_, job.seq);
        }
        for (auto &w : job.works)
            w->queued_on(running_);
        if (!thread_ && !stop_) /* the first job starts the thread (which may throw) */
            thread_ = std::make_unique<std::thread>([this] { run(); });
        queue_.push_back(std::move(job));
        queued_.fetch_add(1); /* seq_cst: against polling_ (progress) */
    }
    cv_->job.notify_one();
    if (polling_.load())
        wake(wake_fd_);
}

void Worker::run()
{
    id_.store(std::this_thread::get_id(), std::memory_order_release);
    for (;;) {
        Job job;
        if (posted_.empty())
            spin_until([this] { return queued_.load(std::memory_order_acquire) > 0; });
        {
            std::unique_lock<std::mutex> lock(qmutex_);
            if (posted_.empty())
                cv_->job.wait(lock, [this] { return stop_ || !queue_.empty(); });
            if (queue_.empty() && !posted_.empty()) {
                lock.unlock(); /* requests out, no new job: drive them (a job wakes it) */
                progress();
                continue;
            }
            if (queue_.empty()) { /* stopping, and every queued job ran */
                exited_ = true;
                cv_->exited.notify_all();
                return;
            }
            job = std::move(queue_.front());
            queue_.pop_front();
            queued_.fetch_sub(1, std::memory_order_relaxed);
        }
        if (job.post)
            post(job);
        else if (job.part)
            run_p2p(std::move(job));
        else
            execute(job);
    }
}

uint64_t Worker::post(Job &job)
{
    if (wake_fd_.load() < 0) {
        const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        wake_fd_.store(fd); /* -1 when none could be made: each wait then lasts kPollMs */
    }
    Posted p;
    const uint64_t id = p.id = ++posts_;
    p.works = std::move(job.works);
    p.staging = std::make_unique<Staging>("send/recv");
    p.staging->post_requests();
    for (auto &w : p.works)
        w->mark_started();
    try {
        at::NoGradGuard no_grad;
        if (comm_->aborted())
            TORCH_CHECK(false, "kcoll: the communicator of this process group was ", why_gone());
        job.part(*p.staging);
    } catch (...) {
        p.error = std::current_exception();
    }
    if (settle(p)) /* a small send is usually complete already */
        finish(p);
    else
        posted_.push_back(std::move(p));
    return id;
}

void Worker::progress(bool jobs_first)
{
    const int fd = wake_fd_.load();
    /* push() counts its job, then wakes the worker if polling_ is set; the worker sets polling_,
     * then looks at the count: one of them sees the other (both seq_cst) */
    polling_.store(true);
    if (jobs_first && queued_.load() > 0) {
        polling_.store(false);
        return; /* a job first */
    }
    /* let go of already (abort, shutdown while a callback ran): no call on the gone handle */
    const coll_result_t r =
        comm_->aborted() ? COLL_ERR_INVALID_USAGE : coll_comm_progress(comm_->get(), kPollMs, fd);
    polling_.store(false);
    uint64_t n = 0;
    if (fd >= 0 && read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN) {
        /* nothing was written: nothing to clear */
    }
    /* the group let go of the communicator (abort, shutdown) while no call ran: the handle is
     * gone, and every call on it fails at once; never try again */
    const bool gone = r != COLL_SUCCESS && r != COLL_ERR_ABORTED && comm_->aborted();
    if (r == COLL_ERR_INVALID_USAGE && !gone) { /* a device call of this communicator runs */
        std::this_thread::yield();
        return;
    }
    std::vector<Posted> done; /* completed outside the loop: a callback may post again */
    if (r != COLL_SUCCESS) {
        std::exception_ptr e;
        try {
            if (gone)
                TORCH_CHECK(false, "kcoll: the communicator of this process group was ",
                            why_gone());
            fail("send/recv", r);
        } catch (...) {
            e = std::current_exception();
        }
        for (auto &p : posted_) {
            p.error = e;
            done.push_back(std::move(p));
        }
        posted_.clear();
    } else {
        for (auto it = posted_.begin(); it != posted_.end();) {
            if (!settle(*it)) {
                ++it;
                continue;
            }
            done.push_back(std::move(*it));
            it = posted_.erase(it);
        }
    }
    for (auto &p : done)
        finish(p);
}

bool Worker::settle(Posted &p)
{
    const auto &reqs = p.staging->requests();
    for (; p.next < reqs.size(); p.next++) {
        int done = 0;
        const coll_result_t r = coll_test(reqs[p.next], &done);
        if (r == COLL_ERR_INVALID_USAGE) /* busy in another thread: later */
            return false;
        if (r != COLL_SUCCESS) { /* the communicator failed: no request of it moves again */
            try {
                /* aborted between two calls: the handle is gone, the group knows why */
                if (comm_->aborted())
                    TORCH_CHECK(false, "kcoll: the communicator of this process group was ",
                                why_gone());
                fail("send/recv", r);
            } catch (...) {
                p.error = std::current_exception();
            }
            return true;
        }
        if (!done)
            return false;
    }
    if (!p.error) {
        try {
            p.staging->finish(); /* the strided outputs */
        } catch (...) {
            p.error = std::current_exception();
        }
    }
    return true;
}

void Worker::finish(Posted &p)
{
    for (auto &w : p.works)
        w->complete(p.error);
}

void Worker::run_p2p(Job first)
{
    std::vector<Job> batch;
    batch.push_back(std::move(first));
    const uint64_t from = batch[0].seq;
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
        /* read before the queue: a wait is made after its job was queued */
        const bool waited = flush_->load(std::memory_order_acquire) >= from;
        const bool released = released_.load(std::memory_order_acquire) >= from;
        std::unique_lock<std::mutex> lock(qmutex_);
        while (!queue_.empty() && queue_.front().part && queue_.front().stream == batch[0].stream) {
            batch.push_back(std::move(queue_.front()));
            queue_.pop_front();
            queued_.fetch_sub(1, std::memory_order_relaxed);
        }
        const auto held = std::chrono::steady_clock::now() - start;
        if (waited || !queue_.empty() || stop_ || held >= kLinger ||
            (released &&
             std::all_of(batch.begin(), batch.end(), [](const Job &j) { return j.small_send; })))
            break;
        if (held < kSpin) { /* the wait that ends it usually comes within microseconds */
            lock.unlock();
            std::this_thread::yield();
        } else {
            cv_->job.wait_for(lock, std::chrono::microseconds(200));
        }
    }
    std::vector<c10::intrusive_ptr<Work>> works;
    for (const auto &j : batch)
        works.insert(works.end(), j.works.begin(), j.works.end());
    complete_after(batch[0].stream, works, [&batch] {
        in_group("send/recv", [&batch](Staging &s) {
            for (const auto &j : batch)
                j.part(s);
        });
    });
}

/* On the worker: the job's calls, then its works' completion (which runs their futures'
 * callbacks here). */
void Worker::execute(Job &job)
{
    complete_after(job.stream, job.works, job.fn);
}

void Worker::complete_after(const c10::optional<c10::Stream> &stream,
                            const std::vector<c10::intrusive_ptr<Work>> &works,
                            const std::function<void()> &fn)
{
    std::exception_ptr e;
    /* the works complete with the job's stream current: a CUDA-aware future records its event
     * there, after the call's gate, so that a then() callback waits for the result */
    c10::OptionalStreamGuard on_stream(stream);
    for (auto &w : works)
        w->mark_started();
    {
        std::lock_guard<std::mutex> lock(running_->m);
        running_->works = &works;
    }
    try {
        at::NoGradGuard no_grad;
        if (comm_->aborted())
            TORCH_CHECK(false, "kcoll: the communicator of this process group was ", why_gone());
        fn();
    } catch (...) {
        e = std::current_exception();
    }
    {
        std::lock_guard<std::mutex> lock(running_->m);
        running_->works = nullptr;
    }
    for (auto &w : works)
        w->complete(e);
}

void Worker::close(const char *how)
{
    std::lock_guard<std::mutex> lock(qmutex_);
    if (closed_.empty())
        closed_ = how;
}

/* Why the communicator is gone, for a job that finds it so: the group's abort or shutdown, else
 * a wait that timed out (Work::wait aborts it). */
std::string Worker::why_gone()
{
    std::lock_guard<std::mutex> lock(qmutex_);
    return closed_.empty() ? std::string("aborted (an earlier wait timed out)") : closed_;
}

void Worker::refuse_if_closed() const
{
    TORCH_CHECK(closed_.empty(), "kcoll: this process group was ", closed_,
                ": its worker has stopped and its communicator is gone; make a new group "
                "(new_group, or init_process_group after destroy_process_group)");
}

} // namespace kcoll
