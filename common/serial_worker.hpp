// One thread running posted jobs in order, with a bounded queue: for work that must not run on
// the caller's thread (an I/O thread) but must keep its order (input from a viewer).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace deskbox {

class SerialWorker {
  public:
    explicit SerialWorker(std::size_t max_queued = 256) : max_queued_(max_queued) {}
    // Runs the jobs already queued, then joins.
    ~SerialWorker() { stop(); }
    SerialWorker(const SerialWorker&) = delete;
    SerialWorker& operator=(const SerialWorker&) = delete;

    // False (the job is dropped) when the queue is full or the worker stopped. The thread
    // starts with the first job. Jobs must not throw.
    bool post(std::function<void()> job) {
        std::lock_guard lock(mutex_);
        if (stopped_ || queue_.size() >= max_queued_) return false;
        queue_.push_back(std::move(job));
        if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
        wake_.notify_one();
        return true;
    }

    // Idempotent; later posts are refused.
    void stop() {
        {
            std::lock_guard lock(mutex_);
            stopped_ = true;
        }
        wake_.notify_all();
        if (!thread_.joinable()) return;
        // Stopped from one of its own jobs: the thread ends after that job.
        if (thread_.get_id() == std::this_thread::get_id())
            thread_.detach();
        else
            thread_.join();
    }

    std::size_t queued() const {
        std::lock_guard lock(mutex_);
        return queue_.size();
    }

  private:
    void run() {
        std::unique_lock lock(mutex_);
        for (;;) {
            wake_.wait(lock, [&] { return stopped_ || !queue_.empty(); });
            if (queue_.empty()) return;
            auto job = std::move(queue_.front());
            queue_.pop_front();
            lock.unlock();
            job();
            lock.lock();
        }
    }

    std::size_t max_queued_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::function<void()>> queue_;
    bool stopped_ = false;
    std::thread thread_;
};

}  // namespace deskbox
