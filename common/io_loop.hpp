// The last line of defence of an I/O thread: runs an io_context until it is stopped, and an
// exception escaping one of its handlers (which would otherwise end the process through
// std::terminate) is logged, counted and the loop goes on. Code on I/O paths still refuses what
// it cannot do at the cause (no throw); this only keeps a bug in one handler from taking down
// every sandbox.
#pragma once

#include <boost/asio/io_context.hpp>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>

namespace deskbox {

// Handler exceptions caught by run_io_loop in this process (deskboxd_io_handler_exceptions_total).
inline std::atomic<std::uint64_t>& io_loop_exceptions() {
    static std::atomic<std::uint64_t> count{0};
    return count;
}

inline void run_io_loop(boost::asio::io_context& io, const char* name) {
    while (true) {
        try {
            io.run();
            return;  // stopped, or out of work
        } catch (const std::exception& e) {
            io_loop_exceptions().fetch_add(1);
            std::fprintf(stderr, "deskboxd: %s I/O thread: a handler threw (%s); going on\n", name,
                         e.what());
        } catch (...) {
            io_loop_exceptions().fetch_add(1);
            std::fprintf(stderr, "deskboxd: %s I/O thread: a handler threw; going on\n", name);
        }
    }
}

}  // namespace deskbox
