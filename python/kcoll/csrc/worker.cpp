/* The worker of a kcoll process group (worker.h). */
#include "worker.h"

#include <c10/core/StreamGuard.h>

#include <algorithm>
#include <exception>
#include <utility>

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
    if (on_worker()) { /* a callback's: at once (push) */
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
        execute(job);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(qmutex_);
        refuse_if_closed(); /* checked where it is queued: none is queued after the stop */
        if (job.part) {
            job.seq = ++seq_;
            for (auto &w : job.works)
                w->flush_on_wait(flush_, job.seq);
        }
        for (auto &w : job.works)
            w->queued_on(running_);
        if (!thread_ && !stop_) /* the first job starts the thread (which may throw) */
            thread_ = std::make_unique<std::thread>([this] { run(); });
        queue_.push_back(std::move(job));
        queued_.fetch_add(1, std::memory_order_release);
    }
    cv_->job.notify_one();
}

void Worker::run()
{
    id_.store(std::this_thread::get_id(), std::memory_order_release);
    for (;;) {
        Job job;
        spin_until([this] { return queued_.load(std::memory_order_acquire) > 0; });
        {
            std::unique_lock<std::mutex> lock(qmutex_);
            cv_->job.wait(lock, [this] { return stop_ || !queue_.empty(); });
            if (queue_.empty()) { /* stopping, and every queued job ran */
                exited_ = true;
                cv_->exited.notify_all();
                return;
            }
            job = std::move(queue_.front());
            queue_.pop_front();
            queued_.fetch_sub(1, std::memory_order_relaxed);
        }
        if (job.part)
            run_p2p(std::move(job));
        else
            execute(job);
    }
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
