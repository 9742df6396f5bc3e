// A real deskboxd child process on a free loopback port, for tests and benchmarks: started
// with a state dir, its stderr in a log file, the port read from its "listening" line.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/child_process.hpp"

namespace deskbox::test {

class DeskboxdProcess {
  public:
    // Throws std::runtime_error with deskboxd's first line and log if it did not start.
    DeskboxdProcess(const std::string& binary, const std::filesystem::path& state_dir,
                    const std::filesystem::path& log_file,
                    const std::vector<std::string>& extra = {}, unsigned long max_open_files = 0)
        : log_file_(log_file) {
        // A test's temp dir is mkdtemp's 0700; a sandbox's user-namespace root must pass
        // through it to the state dir (deskboxd refuses to start otherwise).
        std::filesystem::permissions(state_dir.parent_path(), std::filesystem::perms::others_exec,
                                     std::filesystem::perm_options::add);
        SpawnOptions o;
        // --on-exit kill: a test owns its state dir; nothing may outlive the server there.
        o.argv = {binary,      "--listen", "127.0.0.1:0", "--state-dir", state_dir.string(),
                  "--on-exit", "kill"};
        o.argv.insert(o.argv.end(), extra.begin(), extra.end());
        o.pipe_stdout = true;
        o.stderr_file = log_file.string();
        // A test or benchmark killed (ctest's timeout, ^C) must not leave its server and its
        // sandboxes behind: SIGTERM makes deskboxd kill them and exit.
        o.parent_death_signal = SIGTERM;
        o.max_open_files = max_open_files;  // 0: this process's
        process_ = ChildProcess::spawn(o);
        std::string line;
        char c;
        while (::read(process_.stdout_fd().get(), &c, 1) == 1 && c != '\n') line += c;
        auto colon = line.rfind(':');
        if (line.find("listening") == std::string::npos || colon == std::string::npos)
            throw std::runtime_error("deskboxd did not start: " + line + "\n" + log());
        port_ = std::stoi(line.substr(colon + 1));
    }
    ~DeskboxdProcess() { process_.terminate(std::chrono::seconds(20)); }
    DeskboxdProcess(const DeskboxdProcess&) = delete;
    DeskboxdProcess& operator=(const DeskboxdProcess&) = delete;

    int port() const { return port_; }
    pid_t pid() const { return process_.pid(); }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    std::string log() const {
        std::ifstream in(log_file_);
        return std::string((std::istreambuf_iterator<char>(in)), {});
    }
    // A crash: no chance to clean up.
    void kill_hard() {
        ::kill(process_.pid(), SIGKILL);
        process_.wait();
    }

  private:
    std::filesystem::path log_file_;
    ChildProcess process_;
    int port_ = 0;
};

}  // namespace deskbox::test
