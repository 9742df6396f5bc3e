// FdLimit: this process's soft RLIMIT_NOFILE lowered for a scope (to run code out of fds).
#pragma once

#include <sys/resource.h>

#include <gtest/gtest.h>

#include <algorithm>

namespace deskbox::test {

// This process's soft RLIMIT_NOFILE (what EMFILE is decided by) for a scope, restored at its
// end; the hard limit is left alone (raising it back needs CAP_SYS_RESOURCE, which a container
// may lack). deskboxd's own limit is set in the child (Server's max_open_files).
class FdLimit {
  public:
    explicit FdLimit(rlim_t limit) {
        ::getrlimit(RLIMIT_NOFILE, &saved_);
        rlimit l{std::min(limit, saved_.rlim_max), saved_.rlim_max};
        if (::setrlimit(RLIMIT_NOFILE, &l) != 0) ADD_FAILURE() << "setrlimit " << limit;
    }
    ~FdLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
    FdLimit(const FdLimit&) = delete;
    FdLimit& operator=(const FdLimit&) = delete;

  private:
    rlimit saved_{};
};

}  // namespace deskbox::test
