// The one way tests wait for something asynchronous (a desktop, a node, a server): poll a
// condition until it holds, bounded. Never a fixed sleep, never a timing assert: the bound only
// matters when the condition never holds, and then the test fails.
#pragma once

#include <chrono>
#include <thread>

namespace deskbox::test {

// True as soon as `done()` is; false if it still is not at `timeout` (checked once more then,
// so a slow machine that got there during the last interval passes).
template <typename Predicate>
bool eventually(Predicate&& done, std::chrono::milliseconds timeout = std::chrono::seconds(20),
                std::chrono::milliseconds interval = std::chrono::milliseconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (done()) return true;
        std::this_thread::sleep_for(interval);
    }
    return done();
}

}  // namespace deskbox::test
