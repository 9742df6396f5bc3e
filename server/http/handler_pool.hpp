// The threads request handlers run on. A handler may wait on a sandbox for minutes (a long
// command, a screen wait), so handlers never run on the I/O threads that carry viewer streams,
// VNC and every other connection: each job gets a thread of this pool, which grows when every
// thread is busy (up to max_threads, then jobs queue) and lets threads idle for idle_timeout
// go again.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace deskbox::server {

class HandlerPool {
  public:
    HandlerPool(std::size_t max_threads, std::chrono::milliseconds idle_timeout);
    ~HandlerPool();  // runs nothing new; waits for the jobs running now
    HandlerPool(const HandlerPool&) = delete;
    HandlerPool& operator=(const HandlerPool&) = delete;

    // Runs job on a pool thread. Exceptions escaping a job are swallowed: the job owns its
    // error reporting. After stop() a job is dropped unrun (destroyed on the caller's thread).
    void submit(std::function<void()> job);
    // Drops queued jobs and joins every thread (the running jobs finish first).
    void stop();

  private:
    void work();
    void join_exited_locked(std::unique_lock<std::mutex>& lock);

    const std::size_t max_threads_;
    const std::chrono::milliseconds idle_timeout_;
    mutable std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<std::function<void()>> jobs_;
    std::map<std::thread::id, std::thread> threads_;
    std::vector<std::thread> exited_;  // threads that left on idle, joined by the next caller
    std::size_t idle_ = 0;
    bool stopping_ = false;
};

}  // namespace deskbox::server
