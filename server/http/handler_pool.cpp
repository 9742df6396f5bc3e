#include "server/http/handler_pool.hpp"

#include <algorithm>

namespace deskbox::server {

HandlerPool::HandlerPool(std::size_t max_threads, std::chrono::milliseconds idle_timeout)
    : max_threads_(std::max<std::size_t>(1, max_threads)), idle_timeout_(idle_timeout) {}

HandlerPool::~HandlerPool() {
    stop();
}

void HandlerPool::submit(std::function<void()> job) {
    std::unique_lock lock(mutex_);
    if (stopping_) return;
    join_exited_locked(lock);
    jobs_.push_back(std::move(job));
    // A thread for every job that no idle thread will take, until the cap.
    if (idle_ < jobs_.size() && threads_.size() < max_threads_) {
        std::thread thread([this] { work(); });
        threads_.emplace(thread.get_id(), std::move(thread));
    }
    ready_.notify_one();
}

void HandlerPool::work() {
    std::unique_lock lock(mutex_);
    for (;;) {
        ++idle_;
        bool woken =
            ready_.wait_for(lock, idle_timeout_, [&] { return stopping_ || !jobs_.empty(); });
        --idle_;
        if (stopping_) return;
        if (!woken) {
            // Idle long enough: leave, and let the next caller join this thread.
            auto self = threads_.find(std::this_thread::get_id());
            exited_.push_back(std::move(self->second));
            threads_.erase(self);
            return;
        }
        auto job = std::move(jobs_.front());
        jobs_.pop_front();
        lock.unlock();
        try {
            job();
        } catch (...) {
            // The job reports its own failures; a thread of the pool outlives them.
        }
        job = nullptr;  // whatever the job held goes now, not when the next one arrives
        lock.lock();
    }
}

void HandlerPool::join_exited_locked(std::unique_lock<std::mutex>& lock) {
    if (exited_.empty()) return;
    auto exited = std::move(exited_);
    exited_.clear();
    lock.unlock();  // an exiting thread takes the lock once more on its way out of wait_for
    for (auto& t : exited) t.join();
    lock.lock();
}

void HandlerPool::stop() {
    std::map<std::thread::id, std::thread> threads;
    std::vector<std::thread> exited;
    std::deque<std::function<void()>> dropped;
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        threads.swap(threads_);
        exited.swap(exited_);
        dropped.swap(jobs_);
    }
    ready_.notify_all();
    for (auto& [id, t] : threads) t.join();
    for (auto& t : exited) t.join();
}

}  // namespace deskbox::server
