// deskboxd for a benchmark: a free loopback port and a state dir of its own, stopped on
// destruction; deskboxd is the build's (tests/support/test_paths.hpp).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "common/temp_dir.hpp"
#include "tests/support/deskboxd_process.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox::bench {

class Daemon {
  public:
    explicit Daemon(const std::vector<std::string>& extra_args = {})
        : process_{deskbox::test_paths::kDeskboxd, dir_.path() / "state",
                   dir_.path() / "deskboxd.log", extra_args} {}
    std::string url() const { return process_.url(); }
    int port() const { return process_.port(); }
    std::filesystem::path state() const { return dir_.path() / "state"; }
    pid_t pid() const { return process_.pid(); }

  private:
    TempDir dir_{"deskbox-bench"};
    test::DeskboxdProcess process_;
};

}  // namespace deskbox::bench
